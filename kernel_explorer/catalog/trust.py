"""Whether a candidate's build may be trusted, at a glance: publisher, signature, digest, lock.

A kernel is a stranger's compiled code. kernels 0.18+ guards loading it four ways: it refuses a Hub
repository whose publisher the Hub does not flag (`trustedKernelPublisher`) unless the user opts
in (`trust_remote_code=True` or a list of repo ids); it checks the sigstore signature of a Hub
build's metadata; it hashes each file against the metadata's `digest` and refuses a mismatch; and
a project's `kernels.lock` pins the commit it loads. `Trust` says where a candidate stands on each,
computed without loading it (`_backend/verification.py` asks kernels' own checks), so a user sees
it before switching. A changed file is refused whatever the installed kernels does about it
(0.17 does not check digests): the candidate reads "refused" and never loads.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from kernel_explorer._backend.verification import (
    DigestFinding,
    check_digest,
    check_signature,
    kernels_checks_on_load,
    kernels_release,
)

if TYPE_CHECKING:
    from kernel_explorer._backend.locks import KernelPin


class HubRepository(Protocol):
    """What the trust checks read of a Hub candidate (`hub_access.HubReference` has it)."""

    @property
    def repo_id(self) -> str: ...
    @property
    def ref(self) -> str: ...
    @property
    def revision(self) -> str | None: ...
    @property
    def locked(self) -> bool: ...
    @property
    def trust_remote_code(self) -> bool | tuple[str, ...]: ...
    def trusts_extra(self) -> tuple[str, ...]: ...


#: the word of a digest check that refuses the build (see `Trust.refusal`)
REFUSED = "refused"


@dataclass(frozen=True)
class Check:
    """One trust fact: a short word code compares ("trusted", "refused", ...) and why, for people."""

    word: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.word}: {self.detail}" if self.detail else self.word


@dataclass(frozen=True)
class Trust:
    """A candidate's publisher, signature, digest and lock: each field formats itself (`str`)."""

    publisher: Check
    signature: Check
    digest: Check
    lock: Check

    @property
    def refusal(self) -> str:
        """Why the build must not load ("" when it may): a file changed since it was built."""
        return self.digest.detail if self.digest.word == REFUSED else ""

    def columns(self) -> dict[str, str]:
        """`{"publisher": ..., "signature": ..., "digest": ..., "lock": ...}`: a table's cells."""
        return {name: str(getattr(self, name)) for name in ("publisher", "signature", "digest", "lock")}

    @property
    def short(self) -> str:
        """`publisher trusted · signature unsigned · digest matches · lock not locked`: the words only."""
        return " · ".join(f"{name} {getattr(self, name).word}" for name in self.columns())

    def __str__(self) -> str:
        return "; ".join(f"{name} {text}" for name, text in self.columns().items())


def _not_on_load() -> str:
    """Nothing where kernels checks on load; otherwise what the installed release does ("not checked
    by kernels 0.17.2 on load")."""
    return "" if kernels_checks_on_load() else f"not checked by {kernels_release()} on load"


def _joined(*parts: str) -> str:
    return "; ".join(part for part in parts if part)


def digest_check(variant_path: Path | None, *, why_none: str = "no build for this machine") -> Check:
    """The files of `variant_path` against its metadata's digest (kernels' hashing), in one `Check`."""
    if variant_path is None:
        return Check("not checked", why_none)
    return _digest_words(check_digest(variant_path))


def _digest_words(found: DigestFinding) -> Check:
    if found.error:
        return Check("not checked", f"metadata.json cannot be read: {found.error}")
    if not found.recorded:
        return Check(
            "no digest", _joined("metadata.json records none, so no file can be checked", _not_on_load())
        )
    if found.changed or found.missing or found.unknown:
        what = [
            *(f"{name} changed since it was built" for name in found.changed),
            *(f"{name} was removed since it was built" for name in found.missing),
            *(f"{name} was added since it was built" for name in found.unknown),
        ]
        return Check(REFUSED, "; ".join(what))
    noun = "file matches" if found.files == 1 else f"{found.files} files match"
    return Check(
        "matches", _joined(f"{'the' if found.files == 1 else 'all'} {noun} its digest", _not_on_load())
    )


def local_trust(variant_path: Path | None) -> Trust:
    """A local build (bundled, a peer, a `LocalLayerRepository`): kernels checks only its digest."""
    return Trust(
        publisher=Check("local, not checked"),
        signature=Check("not checked", "local build (kernels checks Hub builds only)"),
        digest=digest_check(variant_path),
        lock=Check("not locked", "local build"),
    )


def hub_trust(
    ref: HubRepository,
    variant_path: Path | None,
    *,
    allowlist: tuple[str, ...] = (),
    trusted_publisher: bool | None = None,
    offline: bool = False,
    waiting: bool = False,
    pins: Iterable[KernelPin] = (),
) -> Trust:
    """A Hub candidate, from its cached build (`variant_path`, None when not downloaded), the user's
    opt-in (`allowlist`, the mapping's own `trust_remote_code`), the Hub's publisher flag (None: not
    asked; `waiting`: the question is out) and the project's pins."""
    not_here = "not downloaded yet (checked on download)"
    return Trust(
        publisher=_publisher(ref, allowlist, trusted_publisher, offline, waiting),
        signature=_signature(ref, variant_path)
        if variant_path is not None
        else Check("not checked", not_here),
        digest=digest_check(variant_path, why_none=not_here),
        lock=_lock(ref, variant_path, pins),
    )


def _publisher(
    ref: HubRepository, allowlist: tuple[str, ...], flagged: bool | None, offline: bool, waiting: bool
) -> Check:
    org = ref.repo_id.split("/", 1)[0]
    if ref.trust_remote_code is True:
        return Check("trusted", "you opted in with trust_remote_code=True")
    if ref.repo_id in (*ref.trusts_extra(), *allowlist):
        return Check("trusted", f"you opted in: trust_remote_code lists {ref.repo_id!r}")
    if offline:
        return Check("not checked", "offline (kernels skips the publisher check offline)")
    if flagged is True:
        return Check("trusted", f"the Hub flags {org!r} as a trusted kernel publisher")
    if flagged is False:
        return Check(
            "not trusted",
            f"the Hub does not flag {org!r}; opt in with trust_remote_code=[{ref.repo_id!r}]",
        )
    return Check("checking" if waiting else "not checked", "the Hub has not answered yet")


def _signature(ref: HubRepository, variant_path: Path) -> Check:
    commit = variant_path.parent.parent.name  # snapshots/<commit>/build/<variant>
    found = check_signature(variant_path, repo_id=ref.repo_id, revision=commit)
    extra = _not_on_load()
    if found.outcome == "verified":
        return Check("verified", _joined(f"by {found.detail}" if found.detail else "", extra))
    if found.outcome == "unsigned":
        return Check("unsigned", _joined("no metadata.json.sigstore", extra))
    return Check(found.outcome, _joined(found.detail, extra))


def _lock(ref: HubRepository, variant_path: Path | None, pins: Iterable[KernelPin]) -> Check:
    here = variant_path.parent.parent.name if variant_path is not None else None
    pinned = next((pin for pin in pins if pin.repo_id == ref.repo_id), None)
    commit = ref.revision if ref.locked else (pinned.commit if pinned is not None else None)
    if commit is None:
        if pinned is not None:
            return Check(
                "not locked", f"the project asks {pinned.requested or 'for it'}; run `kernels lock <project>`"
            )
        return Check("not locked")
    if here is None:
        return Check("locked", f"at {commit[:7]}; not downloaded yet")
    if here == commit:
        return Check("matches", f"pinned commit {commit[:7]}")
    return Check("differs", f"the lock pins {commit[:7]}, {ref.ref} is {here[:7]} here")
