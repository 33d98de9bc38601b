"""Library log lines that say nothing to a reader of this toolkit's output, dropped at the source.

Transformers' flash-attention wrapper logs "Casting fp32 inputs back to torch.float32 for flash-attn
compatibility." whenever a float32 model runs an attention kernel: the "cast" is from float32 to
float32, nothing happens, and the line shows in red in every notebook that switches attention.
Only that no-op line is dropped; a real cast (float32 to bfloat16) is still logged.

A filter on the stdlib logger needs no Transformers import, so installing it costs nothing. It is
installed where a model first meets the explorer (`Explorer`, `load_model`, `load_default_model`),
never on `import kernel_explorer`: importing a package changes no one's logging.
"""

from __future__ import annotations

import logging

_FLASH_LOGGER = "transformers.modeling_flash_attention_utils"
_NO_OP_CAST = "Casting fp32 inputs back to torch.float32 for flash-attn compatibility"


class _DropNoOpCast(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_NO_OP_CAST)


def install() -> None:
    """Add the filter once (idempotent: a reimport or reload does not stack filters)."""
    logger = logging.getLogger(_FLASH_LOGGER)
    if not any(isinstance(f, _DropNoOpCast) for f in logger.filters):
        logger.addFilter(_DropNoOpCast())
