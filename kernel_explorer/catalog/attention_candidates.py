"""The attention row's candidates: PyTorch's implementations, the bundled repository, the user's
repositories and Transformers' flash-attention fallbacks, each with where it stands here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend import attention_features, attention_interface
from kernel_explorer._backend.flash_names import supports_flash
from kernel_explorer._backend.mappings import MappingEntry
from kernel_explorer._backend.repositories import hub_layer_repository, local_layer_repository
from kernel_explorer.build.bundled import BUILD_HINT, BUNDLED_ATTENTION, bundled_repo_path
from kernel_explorer.catalog.availability import Availability, State
from kernel_explorer.catalog.candidates import Candidate
from kernel_explorer.catalog.words import with_code_path
from kernel_explorer.errors import KernelExplorerError, NoUsableKernelError
from kernel_explorer.inspect.layer_groups import ATTENTION

if TYPE_CHECKING:
    from kernels import Mode
    from torch import nn

    from kernel_explorer.catalog.candidates import Catalog
    from kernel_explorer.catalog.probe_verdict import ProbeVerdict

ACCEPTED = (
    "'eager', 'sdpa' (or another name registered in Transformers' AttentionInterface), "
    "a Hub repository as 'org/repo[@revision][:function]', or a local repository folder (a Path)"
)


@dataclass(frozen=True)
class AttentionCandidate(Candidate):
    """One attention implementation the model could run: PyTorch's, or a repository's."""

    implementation: str = ""  # what set_attn_implementation receives ("" for a local folder)
    folder: str | None = None  # a local repository (bundled, or the user's)
    devices: tuple[str, ...] = ()  # where Transformers says the repository has builds (() = not said)

    @property
    def pytorch(self) -> bool:
        return self.folder is None and self.hub is None

    @property
    def repo_label(self) -> str:
        at = f"@{self.path}" if self.path else ""
        if self.folder is not None:
            return f"{self.source}/{Path(self.folder).name}{at}"
        return self.implementation + at

    @property
    def label(self) -> str:
        return self.repo_label

    @property
    def short_label(self) -> str:
        return self.repo_label  # "bundled/flash_attn", "sdpa": no layer class, no "(device, mode)"


def _entry(device: str, repository: Any) -> MappingEntry:
    from kernels import Mode

    return MappingEntry(ATTENTION, device, None, Mode.FALLBACK, repository)


def inference() -> Mode:
    from kernels import Mode

    return Mode.INFERENCE


class AttentionChoices:
    """The candidates of one model's attention row and the choice among them (the door's half that
    reads; `AttentionDoor` switches)."""

    catalog: Catalog
    device: str
    model: nn.Module
    _modules: dict[str, nn.Module]
    _user: list[AttentionCandidate]
    _names: dict[str, AttentionCandidate]

    def captured_call(self) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The arguments and keywords of one captured attention call (None: nothing captured); the
        door knows."""
        return None

    def captured_keywords(self) -> dict[str, Any] | None:
        """The keywords of one captured attention call (s_aux, sliding_window, ...), or None."""
        call = self.captured_call()
        return None if call is None else call[1]

    def _direct(self, candidate: AttentionCandidate, mode: Mode) -> Callable[..., Any] | None:
        """The local repository's `attention_forward` when the door registers it directly (no flash
        glue), else None: Transformers' flash glue runs it. Direct when the repository offers one
        and the model's attention passes nothing such a function hands back to PyTorch's SDPA (sinks,
        softcap, a tensor no attention function names): for those the glue gives the kernel what
        it takes, and the row says what it drops or refuses. A model that hands its attention a mask
        of its own (Doge's dynamic mask, a padded batch) goes through the glue too: the direct
        function answers every masked call with SDPA, so the kernel would never run there."""
        if candidate.folder is None:  # a Hub repository: Transformers loads it, through its glue
            return None
        try:
            module = attention_interface.load_local(Path(candidate.folder))
        except Exception:  # it fails to load: the switch says so
            return None
        function = attention_interface.direct_function(module)
        if function is None or not self._direct_allowed(mode):
            return None
        return function

    def _direct_allowed(self, mode: Mode) -> bool:
        """Whether this model's attention lets a repository's `attention_forward` run directly (see
        `_direct`): read from the model and its captured call, without loading any repository."""
        from kernels import Mode

        captured, training = self.captured_keywords(), Mode.TRAINING in mode
        # the captured call is one module's; the source reads every module's (MiMo-V2-Flash passes
        # sinks in its sliding-window layers only)
        passed = {
            **attention_features.passed_features(self._modules.values(), captured, training=training),
            **attention_features.passed_features(self._modules.values(), None, training=training),
        }
        if set(passed) & set(attention_features.GLUE_ONLY) or attention_features.unread_tensors(captured):
            return False
        return not attention_interface.passes_own_mask(self.captured_call())

    def _stranger_trial(self, candidate: AttentionCandidate, mode: Mode) -> ProbeVerdict | None:
        """A stranger's candidate tried where it cannot take the notebook down, before anything of
        it loads here (the door runs it in its trial worker); None: not tried (PyTorch's, or ours)."""
        return None

    def _own_mask_without_glue(self, candidate: AttentionCandidate) -> str:
        """Why a local kernel cannot run on a model that hands its attention a mask of its own
        (Doge's dynamic mask) and says it takes no flash attention, or "": its `attention_forward`
        would answer every such call with SDPA, and Transformers' flash glue does not run the
        model (it fails on the module, `'DogeAttention' object has no attribute 'is_causal'`)."""
        if candidate.folder is None or supports_flash(self.model):
            return ""
        if not attention_interface.passes_own_mask(self.captured_call()):
            return ""
        try:
            module = attention_interface.load_local(Path(candidate.folder))
            direct = attention_interface.direct_function(module)
        except Exception:  # it fails to load: the switch says so
            return ""
        how = "its attention_forward would answer every call with PyTorch's SDPA, and " if direct else ""
        return (
            f"this model ({type(self.model).__name__}) hands its attention a mask of its own, not "
            f"SDPA's causal one: {how}it takes no flash attention (Transformers' glue), so "
            f"{candidate.label} would never run here"
        )

    def _before_trust(self, candidate: AttentionCandidate, mode: Mode) -> Availability | None:
        """What Transformers would do with `candidate` on this model, read before any switch: it
        redirects the model's flash attention elsewhere (GPT-OSS), refuses a feature the model's
        attention uses (softcap), or drops one (sinks): then a state and one line; else None."""
        from kernels import Mode

        if candidate.pytorch or self._direct(candidate, mode) is not None:
            return None  # direct: what the kernel does not do, the function answers with SDPA
        own_mask = self._own_mask_without_glue(candidate)
        if own_mask:
            return Availability(State.CANNOT_RUN, own_mask)
        name = candidate.implementation
        if candidate.folder is not None:
            name = attention_interface.local_alias(Path(candidate.folder))
        redirect = attention_features.flash_redirect(
            self.model, name
        ) or attention_features.flash_unsupported(self.model, name)
        if redirect:
            return Availability(State.CANNOT_RUN, redirect)
        if candidate.folder is None:  # a Hub repository: its functions are not known before loading
            return None
        try:
            accepted = attention_features.accepted_parameters(
                attention_interface.load_local(Path(candidate.folder))
            )
        except Exception:  # it fails to load: the switch says so
            return None
        if accepted is None:
            return None
        captured = self.captured_keywords()
        passed = attention_features.passed_features(
            self._modules.values(), captured, training=Mode.TRAINING in mode
        )
        unread = attention_features.unread_tensors(captured)
        dropped, refused = attention_features.feature_gaps(passed, accepted, candidate.label, unread)
        if refused:
            return Availability(State.CANNOT_RUN, refused)
        if dropped:
            return Availability(State.WRONG_RESULTS, dropped)
        return None

    def _hub_candidate(self, name: str, source: str, devices: tuple[str, ...] = ()) -> AttentionCandidate:
        repo_id, revision, version, _ = attention_interface.parse_hub_string(name)
        repository = hub_layer_repository(repo_id, ATTENTION, version=version, revision=revision, trust=False)
        return AttentionCandidate(
            _entry(self.device, repository), source, implementation=name, devices=devices
        )

    def _local_candidate(self, folder: Path, source: str) -> AttentionCandidate:
        if (Path(folder) / "build.toml").is_file():  # a kernel-builder source: its CPU build (cached)
            from kernel_explorer.build.builder import build_path

            folder = build_path(folder, progress=False).repo_path
        repository = local_layer_repository(Path(folder), ATTENTION)
        return AttentionCandidate(_entry(self.device, repository), source, folder=str(folder))

    def _builtin(self, name: str) -> AttentionCandidate:
        return AttentionCandidate(_entry(self.device, None), "transformers", implementation=name)

    def add(self, *repositories: str | Path) -> list[AttentionCandidate]:
        """Add the user's attention repositories (Hub strings or local folders) as candidates."""
        added = []
        for item in repositories:
            if isinstance(item, Path):
                candidate = self._local_candidate(item, "user")
            elif isinstance(item, str) and attention_interface.is_hub_string(item):
                candidate = self._hub_candidate(item, "user")
            else:
                raise KernelExplorerError(f"{item!r} is not an attention repository: use {ACCEPTED}.")
            if candidate not in self._user:
                self._user.append(candidate)
            added.append(candidate)
        return added

    def candidates(self) -> list[AttentionCandidate]:
        """Kernels first, in the catalog's source order (the user's, the one the model came with, the
        bundled one, Transformers' fallbacks), then PyTorch's implementations."""
        found: list[AttentionCandidate] = list(self._user)
        found += [c for c in self._names.values() if c.source == "registered"]
        found.append(self._local_candidate(bundled_repo_path(BUNDLED_ATTENTION), "bundled"))
        for _, repo, devices in attention_interface.flash_fallbacks():
            if all(c.implementation != repo for c in found):
                found.append(self._hub_candidate(repo, "transformers", devices))
        found += [self._builtin(name) for name in attention_interface.BUILTIN]
        return found

    def matching(self, word: str) -> list[AttentionCandidate]:
        """The candidates a word names: a source ("bundled", "user"), a label, an implementation or
        the repository's own name ("flash-attn", what the side-by-side table calls it), with an
        optional code path ("bundled@avx2")."""

        def names(c: AttentionCandidate) -> tuple[str, ...]:
            own = c.repo_name if not c.pytorch else ""
            return tuple(n for n in (c.source, c.label, c.implementation, str(c), own) if n)

        return with_code_path(word, lambda w: [c for c in self.candidates() if w in names(c)])

    def availability(
        self, candidate: AttentionCandidate, *, mode: Mode, query_hub: bool = False
    ) -> Availability:
        if candidate.pytorch:
            return Availability(State.READY, f"PyTorch, in Transformers ({candidate.implementation})")
        found = self.catalog.availability(candidate, device=self.device, mode=mode, query_hub=query_hub)
        if candidate.source == "bundled" and found.state is State.NO_BUILD:
            why = f"the bundled attention repository is not built here; {BUILD_HINT}"
            return Availability(State.NO_BUILD, why, trust=found.trust)
        if candidate.devices and self.device not in candidate.devices and found.state is not State.READY:
            listed = ", ".join(candidate.devices)
            why = f"Transformers lists builds for {listed} only ({found})"
            return Availability(State.NO_BUILD, why, trust=found.trust)  # the Hub's trust, as any Hub row's
        tried = None
        if found.state in (State.READY, State.UNVERIFIED, State.DOWNLOADABLE):  # before it loads here
            tried = self._stranger_trial(candidate, mode)
            if tried is not None and tried.refused:  # it crashed, hung or failed there: never here
                return replace(found, state=State.CANNOT_RUN, reason=tried.reason)
        if found.state in (State.READY, State.UNVERIFIED, State.DOWNLOADABLE, State.CHECKING):
            before = self._before_trust(candidate, mode)  # what Transformers would drop says why
            if before is not None:
                return replace(found, state=before.state, reason=before.reason)
        if tried is not None and tried.wrong:
            return replace(found, state=State.WRONG_RESULTS, reason=tried.reason)
        return found

    def found(
        self, *, mode: Mode, query_hub: bool = False
    ) -> tuple[tuple[AttentionCandidate, Availability], ...]:
        return tuple((c, self.availability(c, mode=mode, query_hub=query_hub)) for c in self.candidates())

    def choose(self, candidate: str | Path | Candidate | None, *, mode: Mode) -> AttentionCandidate:
        """The candidate named (a label, an implementation string, a folder), or the first usable kernel."""
        if isinstance(candidate, AttentionCandidate):
            return candidate
        if candidate is None:
            options = [pair for pair in self.found(mode=mode) if not pair[0].pytorch]
            for option, found in options:
                if found.state.usable:
                    return option
            detail = "; ".join(f"{c.label}: {found}" for c, found in options)  # one line: a row's reason
            raise NoUsableKernelError(f"No attention kernel can run here ({self.device}): {detail}")
        if isinstance(candidate, Path):
            return self.add(candidate)[0]
        name = str(candidate).strip()
        name = {n: repo for n, repo, _ in attention_interface.flash_fallbacks()}.get(
            name, name
        )  # as Transformers maps it
        for option in self.matching(name):
            return option
        if name in attention_interface.known_implementations():
            return self._builtin(name)
        if attention_interface.is_hub_string(name):
            return self.add(name)[0]
        raise KernelExplorerError(f"{name!r} is not an attention implementation: use {ACCEPTED}.")
