"""`RetryPolicy` on its own: backoff arithmetic, validation, and which failures it retries."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from fusee_runtime import (
    CodecError,
    Exhausted,
    Failure,
    Fatal,
    FuseeError,
    Rejected,
    RetryPolicy,
    StepFailed,
)


def failure_of(exc: BaseException) -> Failure:
    """The failure a step raising `exc` records (with its live exception chain)."""
    return Failure.of(exc)


def raised(make_exc) -> BaseException:
    """Raises and catches whatever `make_exc` raises, so `__cause__`/`__context__` are set."""
    try:
        make_exc()
    except BaseException as e:
        return e
    raise AssertionError("make_exc did not raise")


# -- defaults and construction --------------------------------------------------------


def test_defaults_match_the_contract() -> None:
    p = RetryPolicy()
    assert p.attempts == 3
    assert p.initial == 0.1
    assert p.factor == 2.0
    assert p.max == 10
    assert p.jitter is True
    assert p.max_elapsed is None
    assert p.non_retryable == ()
    assert p.retry_if is None
    assert p.on_exhausted is None


def test_none_runs_once() -> None:
    p = RetryPolicy.none()
    assert p.attempts == 1
    # Everything else stays at the defaults.
    assert dataclasses.replace(p, attempts=3) == RetryPolicy()
    # A retryable failure is still "retryable" by kind, but there is no attempt left.
    assert p.retryable(Failure("boom"), 1) is True


def test_durations_accept_timedelta() -> None:
    p = RetryPolicy(
        initial=timedelta(milliseconds=250),
        max=timedelta(seconds=3),
        max_elapsed=timedelta(minutes=1),
    )
    assert p.initial == 0.25
    assert p.max == 3.0
    assert p.max_elapsed == 60.0
    assert isinstance(p.initial, float)


def test_ints_are_taken_as_float_seconds() -> None:
    p = RetryPolicy(initial=2, max=7, max_elapsed=30)
    assert (p.initial, p.max, p.max_elapsed) == (2.0, 7.0, 30.0)
    assert all(isinstance(v, float) for v in (p.initial, p.max, p.max_elapsed))


def test_non_retryable_becomes_a_tuple() -> None:
    p = RetryPolicy(non_retryable=["ValueError", KeyError])  # type: ignore[arg-type]
    assert p.non_retryable == ("ValueError", KeyError)
    hash(p.non_retryable)


@pytest.mark.parametrize("kind", ["ValueError", ValueError])
def test_a_single_non_retryable_kind_is_one_entry(kind: object) -> None:
    # Not split into characters ("V", "a", ...) nor refused as not iterable.
    p = RetryPolicy(non_retryable=kind)  # type: ignore[arg-type]
    assert p.non_retryable == (kind,)
    assert not p.retryable(failure_of(ValueError("v")), 1)


@pytest.mark.parametrize("bad", [3, None, int, ["ValueError", 1.5]])
def test_non_retryable_entries_are_names_or_exception_classes(bad: object) -> None:
    with pytest.raises(TypeError, match="non_retryable"):
        RetryPolicy(non_retryable=bad if isinstance(bad, list) else (bad,))  # type: ignore[arg-type]


def test_policy_is_frozen() -> None:
    p = RetryPolicy()
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.attempts = 5  # type: ignore[misc]


def test_on_exhausted_values() -> None:
    assert RetryPolicy(on_exhausted=Exhausted.PAUSE).on_exhausted is Exhausted.PAUSE
    assert Exhausted("fail") is Exhausted.FAIL
    assert Exhausted("pause") is Exhausted.PAUSE


# -- validation ------------------------------------------------------------------------


@pytest.mark.parametrize("attempts", [0, -1])
def test_attempts_counts_the_first(attempts: int) -> None:
    with pytest.raises(ValueError, match="attempts"):
        RetryPolicy(attempts=attempts)


def test_one_attempt_is_allowed() -> None:
    assert RetryPolicy(attempts=1).attempts == 1


@pytest.mark.parametrize("field", ["initial", "max", "max_elapsed"])
def test_negative_durations_are_rejected(field: str) -> None:
    with pytest.raises(ValueError, match=f"RetryPolicy.{field} must not be negative"):
        RetryPolicy(**{field: -1})
    with pytest.raises(ValueError, match=f"RetryPolicy.{field}"):
        RetryPolicy(**{field: timedelta(seconds=-1)})


@pytest.mark.parametrize("field", ["initial", "max", "max_elapsed"])
def test_zero_durations_are_allowed(field: str) -> None:
    assert getattr(RetryPolicy(**{field: 0}), field) == 0.0


@pytest.mark.parametrize("field", ["initial", "max", "max_elapsed"])
@pytest.mark.parametrize("bad", ["1", True, [1]])
def test_durations_of_the_wrong_type_are_rejected(field: str, bad: object) -> None:
    with pytest.raises(TypeError, match="duration"):
        RetryPolicy(**{field: bad})


@pytest.mark.parametrize("factor", [0.0, 0.5, 0.999])
def test_factor_below_one_is_rejected(factor: float) -> None:
    with pytest.raises(ValueError, match="factor"):
        RetryPolicy(factor=factor)


def test_factor_of_one_is_constant_backoff() -> None:
    p = RetryPolicy(initial=0.5, factor=1)
    assert [p.backoff(n) for n in range(1, 6)] == [0.5] * 5


# -- backoff arithmetic ------------------------------------------------------------------


def test_default_backoff_doubles_from_100ms() -> None:
    p = RetryPolicy()
    assert p.backoff(1) == pytest.approx(0.1)
    assert p.backoff(2) == pytest.approx(0.2)
    assert p.backoff(3) == pytest.approx(0.4)


def test_backoff_is_initial_times_factor_to_the_failed_attempt_minus_one() -> None:
    p = RetryPolicy(initial=0.25, factor=3, max=1000)
    assert [p.backoff(n) for n in range(1, 6)] == [0.25, 0.75, 2.25, 6.75, 20.25]


def test_backoff_is_capped_at_max() -> None:
    p = RetryPolicy(initial=1, factor=2, max=5)
    assert [p.backoff(n) for n in range(1, 7)] == [1, 2, 4, 5, 5, 5]


def test_backoff_never_exceeds_max_for_huge_attempts() -> None:
    p = RetryPolicy(initial=1, factor=10, max=60)
    assert p.backoff(300) == 60


@pytest.mark.parametrize("factor", [2, 2.0, 10])
def test_backoff_after_very_many_attempts_is_max_not_an_overflow(factor: float) -> None:
    p = RetryPolicy(attempts=100_000, initial=0.001, factor=factor, max=60)
    assert p.backoff(1025) == 60
    assert p.backoff(99_999) == 60


def test_zero_initial_stays_zero_after_very_many_attempts() -> None:
    assert RetryPolicy(attempts=100_000, initial=0, factor=2).backoff(5000) == 0


def test_max_below_initial_caps_the_first_delay() -> None:
    p = RetryPolicy(initial=5, max=2)
    assert p.backoff(1) == 2


def test_backoff_before_any_failure_is_initial() -> None:
    p = RetryPolicy(initial=0.5, factor=4)
    assert p.backoff(0) == 0.5


def test_zero_initial_means_no_wait() -> None:
    p = RetryPolicy(initial=0, factor=2)
    assert [p.backoff(n) for n in range(1, 4)] == [0, 0, 0]


# -- which failures are retried ------------------------------------------------------------


def test_an_ordinary_failure_is_retryable() -> None:
    p = RetryPolicy()
    assert p.retryable(failure_of(ValueError("x")), 1)
    assert p.retryable(Failure("x"), 1)


def test_fatal_is_never_retried() -> None:
    f = Fatal("card declined")
    assert isinstance(f, Failure)
    assert f.kind == "Fatal"
    assert f.retryable is False
    assert f.message == "card declined"
    p = RetryPolicy(attempts=100, retry_if=lambda _f, _a: True)
    assert not p.retryable(f, 1)
    assert not p.retryable(failure_of(f), 1)


def test_a_fatal_subclass_is_final_and_keeps_its_own_kind() -> None:
    class CardStolen(Fatal):
        pass

    f = failure_of(CardStolen("stolen"))
    assert f.kind == "CardStolen"
    assert f.retryable is False
    assert not RetryPolicy().retryable(f, 1)


def test_failure_with_retryable_false_is_never_retried() -> None:
    f = Failure("nope", kind="Declined", retryable=False)
    assert not RetryPolicy(attempts=100).retryable(f, 1)
    assert not RetryPolicy(retry_if=lambda _f, _a: True).retryable(f, 1)


def test_final_failure_survives_the_journal_round_trip() -> None:
    f = Failure.from_json(Fatal("stop").to_json())
    assert f.kind == "Fatal"
    assert f.retryable is False
    assert not RetryPolicy().retryable(f, 1)


def test_a_failure_subclass_records_its_own_kind() -> None:
    class CardDeclined(Failure):
        pass

    f = failure_of(CardDeclined("declined"))
    assert f.kind == "CardDeclined"
    assert RetryPolicy(non_retryable=("CardDeclined",)).retryable(f, 1) is False
    assert RetryPolicy(non_retryable=(CardDeclined,)).retryable(f, 1) is False
    assert RetryPolicy().retryable(f, 1) is True


@pytest.mark.parametrize("exc", [CodecError("x"), Rejected("x")])
def test_fusee_errors_that_cannot_succeed_on_retry_are_final(exc: FuseeError) -> None:
    assert failure_of(exc).retryable is False
    assert not RetryPolicy().retryable(failure_of(exc), 1)


class TestNonRetryableByName:
    def test_matches_the_kind(self) -> None:
        p = RetryPolicy(non_retryable=("ValueError",))
        assert not p.retryable(failure_of(ValueError("bad")), 1)
        assert p.retryable(failure_of(KeyError("k")), 1)

    def test_matches_a_cause(self) -> None:
        def chained():
            try:
                raise ValueError("inner")
            except ValueError as e:
                raise RuntimeError("outer") from e

        f = failure_of(raised(chained))
        assert [x.kind for x in f.chain()] == ["RuntimeError", "ValueError"]
        assert not RetryPolicy(non_retryable=("ValueError",)).retryable(f, 1)
        assert RetryPolicy(non_retryable=("TypeError",)).retryable(f, 1)

    def test_matches_an_implicit_context(self) -> None:
        # `raise X` inside `except` chains through __context__.
        def implicit():
            try:
                raise ValueError("inner")
            except ValueError:
                raise RuntimeError("while handling")  # noqa: B904

        f = failure_of(raised(implicit))
        assert [x.kind for x in f.chain()] == ["RuntimeError", "ValueError"]
        assert not RetryPolicy(non_retryable=("ValueError",)).retryable(f, 1)

    def test_suppressed_context_is_not_a_cause(self) -> None:
        def suppressed():
            try:
                raise ValueError("inner")
            except ValueError:
                raise RuntimeError("fresh") from None

        f = failure_of(raised(suppressed))
        assert [x.kind for x in f.chain()] == ["RuntimeError"]
        assert RetryPolicy(non_retryable=("ValueError",)).retryable(f, 1)

    def test_matches_a_recorded_failure(self) -> None:
        recorded = Failure.from_json(
            Failure("outer", kind="Outer", cause=Failure("inner", kind="Inner")).to_json()
        )
        assert not RetryPolicy(non_retryable=("Inner",)).retryable(recorded, 1)
        assert not RetryPolicy(non_retryable=("Outer",)).retryable(recorded, 1)
        assert RetryPolicy(non_retryable=("Other",)).retryable(recorded, 1)

    def test_a_step_failure_inside_a_step_is_matched_through(self) -> None:
        inner = Failure("declined", kind="CardDeclined")
        f = failure_of(StepFailed("charge", inner))
        assert f.kind == "StepFailed"
        assert not RetryPolicy(non_retryable=("CardDeclined",)).retryable(f, 1)

    def test_names_do_not_match_subclasses(self) -> None:
        # A name is compared with the recorded kind, which is the exact type name.
        assert RetryPolicy(non_retryable=("LookupError",)).retryable(failure_of(KeyError("k")), 1)


class TestNonRetryableByClass:
    def test_matches_the_exception(self) -> None:
        p = RetryPolicy(non_retryable=(ValueError,))
        assert not p.retryable(failure_of(ValueError("bad")), 1)
        assert p.retryable(failure_of(TypeError("t")), 1)

    def test_matches_subclasses(self) -> None:
        p = RetryPolicy(non_retryable=(LookupError,))
        assert not p.retryable(failure_of(KeyError("k")), 1)
        assert not p.retryable(failure_of(IndexError("i")), 1)
        assert p.retryable(failure_of(ValueError("v")), 1)

    def test_matches_a_cause(self) -> None:
        def chained():
            try:
                {}["missing"]
            except KeyError as e:
                raise RuntimeError("lookup failed") from e

        f = failure_of(raised(chained))
        assert not RetryPolicy(non_retryable=(LookupError,)).retryable(f, 1)
        assert not RetryPolicy(non_retryable=(KeyError,)).retryable(f, 1)
        assert RetryPolicy(non_retryable=(TypeError,)).retryable(f, 1)

    def test_matches_a_recorded_failure_by_type_name(self) -> None:
        recorded = Failure.from_json(failure_of(KeyError("k")).to_json())
        assert recorded.exception is None
        assert not RetryPolicy(non_retryable=(KeyError,)).retryable(recorded, 1)

    def test_names_and_classes_mix(self) -> None:
        p = RetryPolicy(non_retryable=("ValueError", KeyError))
        assert not p.retryable(failure_of(ValueError("v")), 1)
        assert not p.retryable(failure_of(KeyError("k")), 1)
        assert p.retryable(failure_of(OSError("o")), 1)


class TestRetryIf:
    def test_is_called_with_the_failure_and_the_attempt(self) -> None:
        calls: list[tuple[str, str, int]] = []

        def decide(f: Failure, attempt: int) -> bool:
            calls.append((f.kind, f.message, attempt))
            return attempt < 3

        p = RetryPolicy(attempts=10, retry_if=decide)
        f = failure_of(ConnectionError("reset"))
        assert p.retryable(f, 1)
        assert p.retryable(f, 2)
        assert not p.retryable(f, 3)
        assert calls == [
            ("ConnectionError", "reset", 1),
            ("ConnectionError", "reset", 2),
            ("ConnectionError", "reset", 3),
        ]

    def test_can_inspect_the_failure(self) -> None:
        p = RetryPolicy(retry_if=lambda f, _a: "temporary" in f.message)
        assert p.retryable(Failure("temporary outage"), 1)
        assert not p.retryable(Failure("permanent"), 1)

    def test_truthy_results_count(self) -> None:
        assert RetryPolicy(retry_if=lambda _f, _a: 1).retryable(Failure("x"), 1)  # type: ignore[arg-type,return-value]
        assert not RetryPolicy(retry_if=lambda _f, _a: None).retryable(Failure("x"), 1)  # type: ignore[arg-type,return-value]

    def test_is_not_asked_about_final_failures(self) -> None:
        calls: list[int] = []

        def decide(_f: Failure, attempt: int) -> bool:
            calls.append(attempt)
            return True

        p = RetryPolicy(retry_if=decide, non_retryable=("ValueError",))
        assert not p.retryable(Fatal("x"), 1)
        assert not p.retryable(failure_of(ValueError("v")), 1)
        assert calls == []


def test_an_initial_delay_above_max_is_refused_not_capped_in_silence() -> None:
    # (A new user's RetryPolicy(initial=30) retried after 5-10 s: the default max.)
    with pytest.raises(ValueError, match=r"initial \(30 s\) is above the default max \(10 s\)"):
        RetryPolicy(initial=30)
    assert RetryPolicy(initial=30, max=60).backoff(1) == 30
    assert RetryPolicy(initial=30, max=10).backoff(1) == 10  # a max given is taken
    assert RetryPolicy(initial=10).backoff(1) == 10  # equal to the default: taken
