"""What `kernels` checks about a build before it runs it: each file's digest, the metadata's signature.

kernels 0.18+ hashes every file of a build variant on load and refuses one whose SHA-256 differs
from `metadata.json`'s `digest` (a missing digest only warns), and checks the sigstore bundle
`metadata.json.sigstore` of a Hub build when `sigstore` is installed (a bad or missing signature
warns; local builds are not checked). kernels 0.17 does neither on load (its `verify_variant` is
what `kernels verify-signature` runs). The explorer asks the same questions without loading the
kernel, with kernels' own hashing (`Digest.hash_variant`, in both releases) and kernels' own
signature check, and answers with facts; `catalog/trust.py` words them.

A digest check here never trusts kernels' receipts: a file changed after kernels verified it once
is a changed file. Answers are remembered per file state (sizes and modification times), so a
table redraw does not hash a build again.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel_explorer._backend.internals import internal, module_for

# The certificate extension sigstore's Fulcio writes for a GitHub Actions signer: the workflow
# (`https://github.com/<org>/<repo>/.github/workflows/<file>@<ref>`) that signed the build.
_BUILD_SIGNER_URI = "1.3.6.1.4.1.57264.1.9"


@dataclass(frozen=True)
class DigestFinding:
    """A build's files against the digest its metadata records."""

    recorded: bool  # metadata.json has a `digest` entry
    changed: tuple[str, ...] = ()  # files whose SHA-256 differs from the record
    missing: tuple[str, ...] = ()  # files the record lists that are gone
    unknown: tuple[str, ...] = ()  # files the record does not list
    error: str = ""  # metadata.json could not be read as kernels reads it
    files: int = 0  # how many files the record lists

    @property
    def matches(self) -> bool:
        return self.recorded and not (self.changed or self.missing or self.unknown or self.error)


@dataclass(frozen=True)
class SignatureFinding:
    """A Hub build's signature as kernels' check sees it."""

    outcome: str  # "verified", "unsigned", "failed" or "not checked"
    detail: str = ""  # the signing workflow (verified), kernels' reason (failed), why (not checked)


def kernels_checks_on_load() -> bool:
    """Whether the installed `kernels` verifies digests and signatures when it loads a build (0.18+)."""
    validate = importlib.import_module(module_for("kernels.validate"))
    return hasattr(validate, "DigestValidator")


def kernels_release() -> str:
    """`kernels 0.19.1`: the installed release, for sentences that say what it does."""
    return f"kernels {importlib.metadata.version('kernels')}"


def sigstore_installed() -> bool:
    """Whether `sigstore` (kernels' optional dependency for signatures) can be imported here."""
    return importlib.util.find_spec("sigstore") is not None


def _state(variant_path: Path) -> tuple[tuple[str, int, int], ...]:
    """Every file's relative path, size and modification time: what a remembered answer depends on."""
    found = []
    for path in sorted(variant_path.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            stat = path.stat()
            found.append((path.relative_to(variant_path).as_posix(), stat.st_size, stat.st_mtime_ns))
    return tuple(found)


_lock = threading.Lock()
_digests: dict[tuple[str, tuple[tuple[str, int, int], ...]], DigestFinding] = {}
_signatures: dict[tuple[str, str, str, tuple[tuple[str, int, int], ...]], SignatureFinding] = {}


def check_digest(variant_path: Path) -> DigestFinding:
    """Hash `variant_path`'s files as kernels does and compare them with metadata.json's `digest`."""
    variant_path = Path(variant_path)
    try:
        key = (str(variant_path), _state(variant_path))
    except OSError as error:  # a build removed while it is looked at
        return DigestFinding(recorded=False, error=f"{type(error).__name__}: {error}")
    with _lock:
        known = _digests.get(key)
    if known is not None:
        return known
    found = _hash_and_compare(variant_path)
    with _lock:
        _digests[key] = found
    return found


def _hash_and_compare(variant_path: Path) -> DigestFinding:
    from kernels._rust import Digest, DigestValidationError, DigestViolation, Metadata

    try:
        metadata = Metadata.read_from_file(variant_path / "metadata.json")
    except (OSError, ValueError) as error:
        return DigestFinding(recorded=False, error=str(error).splitlines()[0])
    if metadata.digest is None:
        return DigestFinding(recorded=False)
    current = Digest.hash_variant(metadata.digest.algorithm, variant_path)
    try:
        metadata.digest.validate(current)
    except DigestValidationError as error:
        kinds: dict[str, list[str]] = {"changed": [], "missing": [], "unknown": []}
        for violation in error.violations:
            if isinstance(violation, DigestViolation.HashMismatch):
                kinds["changed"].append(violation.path)
            elif isinstance(violation, DigestViolation.MissingFile):
                kinds["missing"].append(violation.path)
            elif isinstance(violation, DigestViolation.UnknownFile):
                kinds["unknown"].append(violation.path)
            else:  # AlgorithmMismatch: the record and the hashing disagree on the algorithm
                return DigestFinding(recorded=True, error=str(violation))
        return DigestFinding(
            recorded=True,
            changed=tuple(sorted(kinds["changed"])),
            missing=tuple(sorted(kinds["missing"])),
            unknown=tuple(sorted(kinds["unknown"])),
        )
    return DigestFinding(recorded=True, files=len(metadata.digest.files))


def check_signature(variant_path: Path, *, repo_id: str, revision: str) -> SignatureFinding:
    """Kernels' signature check of a Hub build at `revision` (a commit), without loading it.

    "not checked" when `sigstore` is not installed (kernels skips the check then too). A valid
    bundle is verified against Sigstore's public trust root, which needs the network; where it
    cannot be reached the answer is "failed" with the reason.
    """
    variant_path = Path(variant_path)
    if not sigstore_installed():
        return SignatureFinding("not checked", "sigstore is not installed (pip install sigstore)")
    if not (variant_path / "metadata.json.sigstore").is_file():
        return SignatureFinding("unsigned", "no metadata.json.sigstore")
    try:
        key = (str(variant_path), repo_id, revision, _state(variant_path))
    except OSError as error:
        return SignatureFinding("failed", f"{type(error).__name__}: {error}")
    with _lock:
        known = _signatures.get(key)
    if known is not None:
        return known
    found = _verify(variant_path, repo_id, revision)
    with _lock:
        _signatures[key] = found
    return found


def _verify(variant_path: Path, repo_id: str, revision: str) -> SignatureFinding:
    try:
        if kernels_checks_on_load():
            from kernels._rust import KernelLocation, Oid

            verify_signature = internal("kernels.verify", "verify_signature")
            location = KernelLocation.remote(repo_id, Oid.from_str(revision), variant_path.name)
            result = verify_signature(variant_path, location=location)
        else:  # kernels 0.17: the check `kernels verify-signature` runs (signature, then the digest)
            result = internal("kernels.verify", "verify_variant")(variant_path)
    except Exception as error:  # Sigstore's trust root out of reach, a bundle sigstore cannot read
        return SignatureFinding(
            "failed", f"could not verify: {type(error).__name__}: {error}".splitlines()[0]
        )
    name = type(result).__name__
    if name == "SignatureBundleMissing":
        return SignatureFinding("unsigned", str(result))
    # 0.17 checks the digest after a good signature: its digest answers mean the signature held
    if name in ("Success", "DigestMissing", "DigestVerificationFailure"):
        return SignatureFinding("verified", signing_workflow(variant_path))
    words = _FAILURES.get(name) or str(result).splitlines()[0].rstrip(":")
    return SignatureFinding("failed", words)


# kernels 0.18+'s words for each failed signature check (0.17's results carry no sentence of their own)
_FAILURES = {
    "SignatureBundleInvalid": "the signature bundle is invalid, so its integrity cannot be verified",
    "SignatureVerificationFailure": "the metadata could not be verified against its signature",
    "MetadataMissing": "the metadata is missing, so its integrity cannot be verified",
    "MetadataInvalid": "the metadata is invalid, so its integrity cannot be verified",
}


def signing_workflow(variant_path: Path) -> str:
    """The GitHub Actions workflow named in the bundle's signing certificate ("" when it names none)."""
    # the [signatures] extra (sigstore, and cryptography with it): absent from other installs, so
    # a type checker cannot resolve them and their values enter here untyped
    x509: Any = importlib.import_module("cryptography.x509")
    sigstore_models: Any = importlib.import_module("sigstore.models")

    bundle = sigstore_models.Bundle.from_json((Path(variant_path) / "metadata.json.sigstore").read_bytes())
    try:
        extension = bundle.signing_certificate.extensions.get_extension_for_oid(
            x509.ObjectIdentifier(_BUILD_SIGNER_URI)
        )
    except x509.ExtensionNotFound:
        return ""
    return der_utf8(extension.value.value)


def der_utf8(data: bytes) -> str:
    """The text of a DER-encoded UTF8String (how Fulcio stores the workflow URI); raw text otherwise."""
    if len(data) >= 2 and data[0] == 0x0C:
        length, start = data[1], 2
        if length & 0x80:  # long form: the next (length & 0x7f) bytes hold the length
            count = length & 0x7F
            length, start = int.from_bytes(data[2 : 2 + count], "big"), 2 + count
        return data[start : start + length].decode("utf-8", "replace")
    return data.decode("utf-8", "replace")
