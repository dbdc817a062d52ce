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

from fusee_runtime.codecs import (
    Codec,
    Encrypt,
    KeyMissing,
    from_environment,
    missing_key,
    wrong_key,
)
from fusee_runtime.errors import CodecError
from fusee_runtime.model.json import Json, JsonObject
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


def handed_out(value: Json, chain: Chain | None = None) -> Json:
    """`value`, to hand to code or a caller: an envelope not opened is an error instead.

    Raises:
        CodecError: `value` is an envelope this process could not open (naming its key,
            and saying whether the key it has under that id is wrong, as `chain` knows).
    """
    said = label(value)
    if said is None:
        return value
    if said.startswith("encrypted (key "):
        key_id = said[len("encrypted (key ") : -1]
        if chain is not None and ENCRYPTED + key_id in chain.wrong:
            raise wrong_key(key_id)
        raise missing_key(key_id)
    raise CodecError(f"a payload is {said}: this process has no codec that decodes it")


class Chain:
    """One engine's codec chain (see the module)."""

    def __init__(self, codecs: Sequence[Codec], strict: bool) -> None:
        self.codecs = tuple(codecs)
        self.strict = strict
        encrypt = next((c for c in self.codecs if isinstance(c, Encrypt)), None)
        self.encrypts_with = None if encrypt is None else ENCRYPTED + encrypt.current
        """The label of what it encrypts new payloads with (None: it does not)."""
        self.unopened: set[str] = set()
        """The encrypting labels of envelopes read back and not opened (not `strict`)."""
        self.opened_with: set[str] = set()
        """The encrypting labels of envelopes it opened."""
        self.wrong: set[str] = set()
        """The encrypting labels whose key it has, and which did not open with it."""
        self.checks: dict[str, JsonObject] = {}
        """An envelope of each key this home's payloads were encrypted with, by label:
        a checkpoint keeps them (`Checkpoints`), so that a key missing or wrong is found
        at open even where no payload it encrypted is left to replay."""
        self.refused: str | None = None
        """Why this chain appends nothing (`refusing`), or None: checked before every
        record is appended, so that no part of a command is written."""

    def reading(self) -> Chain:
        """A chain of the same codecs that keeps what it cannot open (not `strict`): for a
        run's history, shown to people, so that a closed run whose key was retired is
        still shown, its values as `encrypted (key k0)`. It stores nothing."""
        return Chain(self.codecs, strict=False)

    @property
    def encodes(self) -> bool:
        """Whether payloads go through it where stored (else they are stored as they are)."""
        return bool(self.codecs) or self.refused is not None

    # -- storing ------------------------------------------------------------------------

    def stored(self, payload: Payload) -> bytes:
        """The JSON that stands for `payload` where it is stored.

        Raises:
            CodecError: this chain may not write (`refused`); a codec failed.
        """
        kept = payload.stored
        if kept is not None and kept[0] is self:
            return kept[1]
        json = payload.json
        if json.startswith(RESERVED):  # an envelope not opened here: stored as it was
            return json
        if self.refused is not None:
            raise CodecError(self.refused)
        data, labels = json, []
        for codec in self.codecs:
            made = codec.encode(data)
            if made is not None:
                labels.append(made[0])
                data = made[1]
        out = json if not labels else envelope(labels, data)
        if labels and self.encrypts_with is not None and self.encrypts_with not in self.checks:
            self.checks[self.encrypts_with] = orjson.loads(out)
        payload.stored = (self, out)
        return out

    def refusing(self) -> str | None:
        """Why this chain may write nothing, or None: this home's payloads are encrypted
        and it has no key to encrypt with, a wrong one, or none of the keys they were
        encrypted with (keys meant for another home)."""
        keys = sorted(x[len(ENCRYPTED) :] for x in self.unopened)
        if not keys:
            return None
        if self.encrypts_with in self.unopened:
            return (
                f"key {self.encrypts_with[len(ENCRYPTED) :]} does not decrypt this home's "
                "payloads (a wrong key?): nothing was written"
            )
        if self.encrypts_with is None or not self.opened_with:
            has = "no key" if self.encrypts_with is None else "none of the keys"
            return (
                f"this home's payloads are encrypted (key {keys[-1]}), and this process has "
                f"{has} they were encrypted with (Config(codec=Encrypt(...)), or "
                "FUSEE_KEYS): nothing was written"
            )
        return None

    def sealed(self, value: Json) -> Json:
        """A value kept as JSON inside a larger document (a reset run's inherited ops, in
        a checkpoint or the history store), as `stored` would store its payload."""
        if not self.encodes:
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
        labels = [x for x in value.get(MARK) or () if isinstance(x, str)]
        encrypted = [x for x in labels if x.startswith(ENCRYPTED)]
        try:
            json = self._open(value)
            payload = Payload.kept(orjson.loads(json))
        except (CodecError, ValueError, TypeError) as e:  # (a codec of the user's, too)
            if self.strict:
                raise e if isinstance(e, CodecError) else CodecError(str(e)) from None
            if encrypted:
                if not isinstance(e, KeyMissing):
                    self.wrong.add(encrypted[-1])
                self.unopened.update(encrypted)
                self.checks.setdefault(encrypted[-1], value)
                self.refused = self.refusing()
            return Payload.kept(value)
        if encrypted:
            self.checks.setdefault(encrypted[-1], value)
            if encrypted[-1] not in self.opened_with:
                self.opened_with.add(encrypted[-1])
                self.refused = self.refusing()
        # Kept to be stored again as it is only when this chain would make the same:
        # else (a key rotated, a codec added) the next checkpoint re-encodes it.
        if labels == [c for c in self._labels(labels)]:
            payload.stored = (self, orjson.dumps(value))
        return payload

    def _labels(self, labels: list[str]) -> list[str]:
        """`labels` where this chain would make them now: its current key's label in place
        of another key's, codecs it has not dropped (`[]` when it would make others)."""
        mine = [x for x in labels if any(c.decodes(x) for c in self.codecs)]
        if mine != labels:
            return []
        return [self.encrypts_with or x if x.startswith(ENCRYPTED) else x for x in labels]

    def verify(self, checks: dict[str, JsonObject]) -> None:
        """Opens an envelope of each key a checkpoint says this home used (`checks`): a
        key it has must open its own (else it is wrong), and it must have one of them at
        least (else it has another home's keys, or none); a key it has not is one
        retired, whose payloads are shown as `encrypted (key k0)` (and what needs their
        values, `opened` refuses).

        Raises:
            CodecError: a key wrong, or none of the home's, and the chain is `strict`.
        """
        missing: list[CodecError] = []
        for name, check in checks.items():
            self.checks.setdefault(name, check)
            try:
                self._open(check)
            except KeyMissing as e:  # (a key retired is not wrong: see below)
                missing.append(e)
                self.unopened.add(name)
                continue
            except (CodecError, ValueError, TypeError) as e:  # a wrong key, or damage
                if self.strict:
                    raise e if isinstance(e, CodecError) else CodecError(str(e)) from None
                self.unopened.add(name)
                self.wrong.add(name)
                continue
            self.opened_with.add(name)
        if missing and not self.opened_with and self.strict:
            raise missing[-1]  # none of its keys: another home's, or none at all
        self.refused = self.refusing()

    def missing(self) -> CodecError | None:
        """The error of a key it could not open payloads with (None: it opened all)."""
        if self.wrong:
            return wrong_key(sorted(self.wrong)[-1][len(ENCRYPTED) :])
        if not self.unopened:
            return None
        return missing_key(sorted(self.unopened)[-1][len(ENCRYPTED) :])

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
