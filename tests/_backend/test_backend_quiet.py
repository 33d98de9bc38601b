"""The no-op flash-attn cast line is dropped; a real cast still shows (issue 28 item 12)."""

from __future__ import annotations

import logging

import torch


def test_the_no_op_cast_line_is_dropped_and_a_real_cast_is_not() -> None:
    from transformers.modeling_flash_attention_utils import fa_peft_integration_check

    from kernel_explorer._backend import quiet

    quiet.install()  # what the first Explorer or loaded model does

    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = logging.getLogger("transformers.modeling_flash_attention_utils")
    handler = Keep()
    logger.addHandler(handler)
    try:
        q = k = v = torch.zeros(1, 2, 2, 4)
        fa_peft_integration_check(q, k, v, torch.float32)  # what a float32 model does: nothing cast
        assert not [m for m in seen if "Casting fp32" in m]
        fa_peft_integration_check(q, k, v, torch.bfloat16)
        assert any("Casting fp32 inputs back to torch.bfloat16" in m for m in seen)
    finally:
        logger.removeHandler(handler)
