"""Payload codecs: what turns a payload's JSON into what is stored, and back.

`Config(codec=...)` takes one codec or a chain of them (a list, applied in its order
when a payload is stored, in reverse when it is read). A payload is any value of the
user's: an input, a step's result, a signal's or an update's value, a stream item,
a heartbeat's details, a result. Whatever stores payloads stores what the chain made:
the journal, checkpoints, the history store, PostgreSQL's tables.

    from fusee_runtime.codecs import Compress, Encrypt
    Config(codec=[Compress(threshold_bytes=1024), Encrypt(keys={"k1": key}, current="k1")])

A payload the chain changed is stored as an envelope, a JSON object that says which
codecs made it, by their labels (`"zlib"`, `"aes-gcm:k1"`), and holds the bytes they
made in base64:

    {"\\u0000codec": ["zlib", "aes-gcm:k1"], "data": "..."}

The journal's framing, its lsns and its records' kinds, ids, names and times stay
as they are, so recovery, `fusee check`, `fusee history` and the web UI read a home
without the key, and show `encrypted (key k1)` where a value would be. Search
attributes (`ctx.set_attributes`), failures' messages and the run log's lines are
not payloads and are stored as they are: put no secret in them.

The size limit (`Config.payload_bytes_max`) is on a payload's JSON before any codec:
the room a record has is made for what the chain can make of a payload at the limit.

A codec of one's own is any object with `encode(data) -> (label, data) | None` (None:
left as it is), `decode(label, data) -> data` and `decodes(label) -> bool`, whose
labels no other codec of the chain uses.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import zlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from fusee_runtime.errors import CodecError

__all__ = ["Codec", "Compress", "Encrypt", "from_environment"]

KEYS_ENV = "FUSEE_KEYS"
"""The keys of `Encrypt.from_env`: `k1=<base64>,k2=<base64>`, the newest last."""
KEYS_FILE_ENV = "FUSEE_KEYS_FILE"
"""A file of keys for `Encrypt.from_file`: one `k1=<base64>` a line, the newest last."""


@runtime_checkable
class Codec(Protocol):
    """What a codec of `Config.codec` is."""

    def encode(self, data: bytes) -> tuple[str, bytes] | None:
        """`data` made into what is stored, with the label that undoes it; None leaves
        `data` as it is."""

    def decode(self, label: str, data: bytes) -> bytes:
        """What `encode` was given, from what it made under `label`.

        Raises:
            CodecError: `data` cannot be decoded (a missing or wrong key, damage).
        """

    def decodes(self, label: str) -> bool:
        """Whether `label` is one of this codec's."""


class Compress:
    """Compresses (zlib) a payload whose JSON is over `threshold_bytes`, when that makes
    it smaller."""

    LABEL = "zlib"

    def __init__(self, threshold_bytes: int = 1024, level: int = 6) -> None:
        if threshold_bytes < 0 or not -1 <= level <= 9:
            raise ValueError("Compress takes threshold_bytes >= 0 and a level from -1 to 9")
        self.threshold_bytes = threshold_bytes
        self.level = level

    def encode(self, data: bytes) -> tuple[str, bytes] | None:
        if len(data) <= self.threshold_bytes:
            return None
        packed = zlib.compress(data, self.level)
        return (self.LABEL, packed) if len(packed) < len(data) else None

    def decode(self, label: str, data: bytes) -> bytes:
        try:
            return zlib.decompress(data)
        except zlib.error as e:
            raise CodecError(f"a compressed payload cannot be read: {e}") from None

    def decodes(self, label: str) -> bool:
        return label == self.LABEL

    def __repr__(self) -> str:
        return f"Compress(threshold_bytes={self.threshold_bytes})"


KeyFetch = Callable[[str], bytes | None]
"""A key service's callback: the key of a key id, or None when it has none."""

_PREFIX = "aes-gcm:"
_NONCE_BYTES = 12


class Encrypt:
    """Encrypts every payload with AES-GCM (the `cryptography` package:
    `pip install 'fusee[crypto]'`).

    `keys` maps key ids to keys (16, 24 or 32 bytes); new payloads are encrypted with
    `current` (the last of `keys` when not given), and a payload names the key that
    encrypted it, so older keys still decrypt what they encrypted: rotating a key is
    adding a new one as `current` and keeping the old ones for as long as payloads
    they encrypted are kept. `fetch(key_id)` is asked for a key id `keys` does not
    have (a key service), once per id. `Encrypt.from_env()` and
    `Encrypt.from_file(path)` read keys written as `k1=<base64>`.
    """

    def __init__(
        self,
        keys: Mapping[str, bytes] | None = None,
        current: str | None = None,
        *,
        fetch: KeyFetch | None = None,
    ) -> None:
        self._keys: dict[str, bytes] = {}
        for key_id, key in (keys or {}).items():
            self._keys[_key_id(key_id)] = _key(key_id, key)
        self._fetch = fetch
        self._fetched: set[str] = set()  # (asked once each, found or not)
        self._ciphers: dict[str, Any] = {}
        current = current if current is not None else next(reversed(self._keys), None)
        if current is None:
            raise KeysInvalid("Encrypt needs a current key: give keys, or current with fetch")
        self.current = _key_id(current)
        try:
            self._cipher(self.current)  # a current key that cannot be had fails here
        except CodecError as e:
            if self.current not in self._keys:
                raise KeysInvalid(
                    f"Encrypt: no key {self.current} (current) to encrypt with"
                ) from None
            raise KeysInvalid(str(e)) from None

    @classmethod
    def from_env(cls, variable: str = KEYS_ENV, current: str | None = None) -> Encrypt:
        """The keys in environment variable `variable` (`k1=<base64>,k2=<base64>`)."""
        text = os.environ.get(variable, "")
        return cls(_parse(text.replace(",", "\n"), f"${variable}"), current)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], current: str | None = None) -> Encrypt:
        """The keys in the file at `path`: one `k1=<base64>` a line (`#` starts a comment)."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise KeysInvalid(f"cannot read the key file {path}: {e.strerror}") from None
        except UnicodeDecodeError:
            raise KeysInvalid(f"the key file {path} is not text (id=<base64> lines)") from None
        return cls(_parse(text, str(path)), current)

    @property
    def key_ids(self) -> list[str]:
        """The key ids it has now (those `fetch` gave included)."""
        return list(self._keys)

    def encode(self, data: bytes) -> tuple[str, bytes] | None:
        nonce = os.urandom(_NONCE_BYTES)
        label = _PREFIX + self.current
        return label, nonce + self._cipher(self.current).encrypt(nonce, data, label.encode())

    def decode(self, label: str, data: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag

        key_id = label[len(_PREFIX) :]
        cipher = self._cipher(key_id)
        try:
            return bytes(cipher.decrypt(data[:_NONCE_BYTES], data[_NONCE_BYTES:], label.encode()))
        except InvalidTag:
            raise wrong_key(key_id) from None

    def decodes(self, label: str) -> bool:
        return label.startswith(_PREFIX)

    def _cipher(self, key_id: str) -> Any:
        cipher = self._ciphers.get(key_id)
        if cipher is not None:
            return cipher
        key = self._keys.get(key_id)
        if key is None and self._fetch is not None and key_id not in self._fetched:
            self._fetched.add(key_id)
            try:
                fetched = self._fetch(key_id)
            except Exception as e:  # (the key service's own error, in one line)
                raise CodecError(f"the key service failed for key {key_id}: {e!r}") from None
            if fetched is not None:
                key = self._keys[key_id] = _key(key_id, fetched)
        if key is None:
            raise missing_key(key_id)
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError:
            raise CodecError(
                "Encrypt needs the cryptography package: pip install 'fusee[crypto]'"
            ) from None
        cipher = self._ciphers[key_id] = AESGCM(key)
        return cipher

    def __repr__(self) -> str:  # never the keys
        return f"Encrypt(key_ids={self.key_ids}, current={self.current!r})"


class KeyMissing(CodecError):
    """A payload is encrypted with a key this process does not have (a `CodecError`)."""


def missing_key(key_id: str) -> CodecError:
    """The error of a payload encrypted with a key this process does not have."""
    return KeyMissing(
        f"a payload is encrypted with key {key_id}, which this process does not have "
        f"(Config(codec=Encrypt(...)), or {KEYS_ENV})"
    )


def wrong_key(key_id: str) -> CodecError:
    """The error of a payload that key `key_id`, as this process has it, does not decrypt."""
    return CodecError(
        f"key {key_id} does not decrypt a payload it is named on: the key is wrong "
        "(or the payload was changed)"
    )


def from_environment() -> Codec | None:
    """`Config.codec`'s default: `Encrypt` with the keys of `FUSEE_KEYS` (or of the
    file `FUSEE_KEYS_FILE` names) when set, else None (payloads stored as they are).
    Set and empty is an error (`KeysInvalid`), not "no encryption": that is what a key
    that failed to load leaves; both set is one too.

    Raises:
        KeysInvalid: keys that cannot be used, or both variables set.
    """
    given = [name for name in (KEYS_ENV, KEYS_FILE_ENV) if name in os.environ]
    if len(given) == 2:
        raise KeysInvalid(f"{KEYS_ENV} and {KEYS_FILE_ENV} are both set: set one")
    if given == [KEYS_ENV]:
        return Encrypt.from_env()
    if given == [KEYS_FILE_ENV]:
        return Encrypt.from_file(os.environ[KEYS_FILE_ENV])
    return None


def chain_of(codec: Codec | Iterable[Codec] | None) -> tuple[Codec, ...]:
    """`Config.codec` as a tuple of codecs, checked."""
    if codec is None:
        return ()
    codecs = (codec,) if isinstance(codec, Codec) else tuple(codec)
    for c in codecs:
        if not isinstance(c, Codec):
            raise ValueError(
                f"Config.codec takes codecs (encode, decode, decodes), not {type(c).__name__}"
            )
    return codecs


KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
"""A key id: a short name of letters, digits, `.`, `_`, `:` and `-` (never base64 of a
key: a `+`, `/` or `=` in it is refused, and an error never shows what it refuses)."""


class KeysInvalid(CodecError, ValueError):
    """Keys that cannot be used, as given (`Encrypt`, `FUSEE_KEYS`, a key file): a
    `CodecError` (one line and exit 2 from the `fusee` command) and a `ValueError`."""


def _key_id(key_id: object, where: str = "Encrypt") -> str:
    if not isinstance(key_id, str) or not KEY_ID.fullmatch(key_id):
        shown = f" {key_id!r}" if isinstance(key_id, str) and len(key_id) <= 20 else ""
        raise KeysInvalid(
            f"{where}: a key id is up to 64 letters, digits, '.', '_', ':' or '-'; "
            f"not{shown or ' that one (not shown: it may be a key)'}"
        )
    return key_id


def _key(key_id: str, key: object, where: str = "Encrypt") -> bytes:
    if not isinstance(key, bytes | bytearray) or len(key) not in (16, 24, 32):
        raise KeysInvalid(f"{where}: key {key_id} is not 16, 24 or 32 bytes")
    return bytes(key)


def _parse(text: str, where: str) -> dict[str, bytes]:
    """Keys written `id=<base64>`, one a line; an error names the line, never its text."""
    keys: dict[str, bytes] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        key_id, eq, encoded = (part.strip() for part in line.partition("="))
        at = f"{where}, key {n}" if where.startswith("$") else f"{where}, line {n}"
        if not eq or not encoded:
            raise KeysInvalid(f"{at}: a key is written id=<base64> (as k1=...), and is not")
        key_id = _key_id(key_id, at)
        if key_id in keys:
            raise KeysInvalid(f"{at}: key {key_id} is given twice")
        try:
            key = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise KeysInvalid(f"{at}: key {key_id} is not base64") from None
        keys[key_id] = _key(key_id, key, at)
    if not keys:
        raise KeysInvalid(f"{where} has no key")
    return keys
