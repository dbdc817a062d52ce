"""A codec chain applied to payloads where they are stored (`Chain`), and envelopes.

`fusee_runtime.codecs` says what a codec is and what an envelope looks like. A
`Chain` is one engine's: `stored(payload)` is what the journal, a checkpoint or the
history store holds of a payload (cached on the payload, so a record kept in memory
and stored again, in each checkpoint, is encoded once); `opened(value)` is the
payload an envelope read back holds.

An envelope that cannot be opened (its key is missing) is, with `strict`, a
`CodecError` naming the key id: an engine that drives runs needs their values, and
stops before it writes anything. Without `strict` (a passive engine: a command that
looks, `fusee check`, `history`) it stays the envelope it is, shown as `encrypted
(key k1)` (`label`), and is stored again as it is; but such a chain writes no new
payload when it has no key to encrypt with (`refusing`), so that nothing readable
joins an encrypted journal.

Part of `fusee_runtime.model`: it imports nothing of the engine, the journal or the
control surface.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any

import orjson

from fusee_runtime.codecs import Codec, Encrypt, from_environment, missing_key
from fusee_runtime.errors import CodecError
from fusee_runtime.model.json import Json
from fusee_runtime.model.payload import MARK, RESERVED, Payload

ENCRYPTED = "aes-gcm:"
"""How the label of an encrypting codec begins."""


def is_envelope(value: object) -> bool:
    """Whether `value` (JSON read back) is an envelope: an object whose first key is MARK."""
    return type(value) is dict and bool(value) and next(iter(value)) == MARK


def label(value: object) -> str | None:
    """What to show for a value that is an envelope not opened (`encrypted (key k1)`,
    `encoded (zlib)`), or None for any other value."""
    if not is_envelope(value):
        return None
    labels = value.get(MARK) if isinstance(value, dict) else None
    if not isinstance(labels, list):
        return "encoded"
    keys = [x[len(ENCRYPTED) :] for x in labels if isinstance(x, str) and x.startswith(ENCRYPTED)]
    if keys:
        return f"encrypted (key {keys[-1]})"
    return f"encoded ({', '.join(str(x) for x in labels)})"


def shown(value: Json) -> Json:
    """`value`, or what to show in its place when it is an envelope not opened."""
    said = label(value)
    return value if said is None else said


class Chain:
    """One engine's codec chain (see the module)."""

    def __init__(self, codecs: Sequence[Codec], strict: bool) -> None:
        self.codecs = tuple(codecs)
        self.strict = strict
        encrypt = next((c for c in self.codecs if isinstance(c, Encrypt)), None)
        self.encrypts_with = None if encrypt is None else ENCRYPTED + encrypt.current
        """The label of what it encrypts new payloads with (None: it does not)."""
        self.unopened: set[str] = set()
        """The labels of envelopes read back and not opened (not `strict`)."""

    def __bool__(self) -> bool:  # (a chain of no codec stores payloads as they are)
        return bool(self.codecs) or bool(self.unopened)

    # -- storing ------------------------------------------------------------------------

    def stored(self, payload: Payload) -> bytes:
        """The JSON that stands for `payload` where it is stored.

        Raises:
            CodecError: this chain cannot encrypt, and the journal's payloads are
                encrypted (`refusing`); a codec failed.
        """
        kept = payload.stored
        if kept is not None and kept[0] is self:
            return kept[1]
        json = payload.json
        if json.startswith(RESERVED):  # an envelope not opened here: stored as it was
            return json
        refusing = self.refusing()
        if refusing is not None:
            raise CodecError(refusing)
        data, labels = json, []
        for codec in self.codecs:
            made = codec.encode(data)
            if made is not None:
                labels.append(made[0])
                data = made[1]
        out = json if not labels else envelope(labels, data)
        payload.stored = (self, out)
        return out

    def refusing(self) -> str | None:
        """Why this chain writes no new payload, or None."""
        if self.encrypts_with in self.unopened:
            return (
                f"key {self.encrypts_with[len(ENCRYPTED) :]} does not decrypt this journal's "
                "payloads (a wrong key?): nothing was written"
            )
        if self.encrypts_with is not None:
            return None
        keys = sorted(x[len(ENCRYPTED) :] for x in self.unopened if x.startswith(ENCRYPTED))
        if not keys:
            return None
        return (
            f"this journal's payloads are encrypted (key {keys[-1]}), and this process has no "
            "key to encrypt new ones with (Config(codec=Encrypt(...)), or FUSEE_KEYS): "
            "nothing was written"
        )

    def sealed(self, value: Json) -> Json:
        """A value kept as JSON inside a larger document (a reset run's inherited ops, in
        a checkpoint or the history store), as `stored` would store its payload."""
        if not self:
            return value
        made: Json = orjson.loads(self.stored(Payload.kept(value)))
        return made

    # -- reading ------------------------------------------------------------------------

    def opened(self, value: dict[str, Any]) -> Payload:
        """The payload an envelope read back holds (or the envelope, kept as it is, when
        it cannot be opened and this chain is not `strict`).

        Raises:
            CodecError: it cannot be opened (a key missing or wrong, damage), and the
                chain is `strict`.
        """
        try:
            json = self._open(value)
        except CodecError:
            if self.strict:
                raise
            self.unopened.update(x for x in value.get(MARK) or () if isinstance(x, str))
            return Payload.kept(value)
        payload = Payload.kept(orjson.loads(json))
        payload.stored = (self, orjson.dumps(value))
        return payload

    def opened_value(self, value: Json) -> Json:
        """The value `sealed` was given (or, as `opened` says, the envelope)."""
        if isinstance(value, dict) and is_envelope(value):
            opened: Json = self.opened(value).value
            return opened
        return value

    def _open(self, value: dict[str, Any]) -> bytes:
        labels, data = value.get(MARK), value.get("data")
        if not isinstance(labels, list) or not isinstance(data, str):
            raise CodecError("an encoded payload is damaged: no codec labels, or no data")
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise CodecError("an encoded payload is damaged: its data is not base64") from None
        for name in reversed(labels):
            codec = next((c for c in self.codecs if c.decodes(name)), None)
            if codec is None:
                if isinstance(name, str) and name.startswith(ENCRYPTED):
                    raise missing_key(name[len(ENCRYPTED) :])
                raise CodecError(f"a payload is encoded by codec {name!r}, not in Config.codec")
            raw = codec.decode(name, raw)
        return raw


def envelope(labels: list[str], data: bytes) -> bytes:
    """The JSON of an envelope: what codecs `labels` made, `data`."""
    return orjson.dumps({MARK: labels, "data": base64.b64encode(data).decode()})


PLAIN = Chain((), strict=True)
"""The chain of an engine with no codec (payloads stored as they are)."""


def of_environment() -> Chain:
    """The strict chain of the keys in the environment (`FUSEE_KEYS`, `FUSEE_KEYS_FILE`):
    for reading values outside an engine (the replay checker)."""
    codec = from_environment()
    return Chain(() if codec is None else (codec,), strict=True)


def looking() -> Chain:
    """A chain for reading what is stored without its values (a record's kind, ids,
    names): it opens no envelope, keeps each as it is, and stores nothing."""
    return Chain((), strict=False)
