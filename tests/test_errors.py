"""AML error codes, messages, the exception hierarchy and native translation."""

from __future__ import annotations

import pickle

import pytest

from aml_core import errors as E


def test_codes_have_amls_values() -> None:
    assert [(c.name, int(c)) for c in E.ErrorCode] == [
        ("SUCCESS", 0),
        ("FAILURE", 1),
        ("ENOMEM", 2),
        ("EINVAL", 3),
        ("EDOM", 4),
        ("ENOTSUP", 5),
        ("EBUSY", 6),
        ("EPERM", 7),
    ]


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (0, "Success"),
        (1, "Generic error"),
        (2, "Not enough memory"),
        (3, "Invalid argument"),
        (4, "Value out of bound"),
        (5, "Operation not supported"),
        (6, "Underlying resource is not available for operation"),
        (7, "Insufficient permissions"),
        (-2, "Not enough memory"),
        (8, "Unknown error: 8 is not an AML error code (0..7)"),
        (22, "Unknown error: 22 is not an AML error code (0..7)"),
        (-1000, "Unknown error: 1000 is not an AML error code (0..7)"),
        ("x", "Unknown error: 'x' is not an AML error code (0..7)"),
    ],
)
def test_strerror(code: object, message: str) -> None:
    assert E.strerror(code) == message  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cls", "code", "builtins"),
    [
        (E.AMLFailure, E.ErrorCode.FAILURE, (RuntimeError,)),
        (E.AMLMemoryError, E.ErrorCode.ENOMEM, (MemoryError,)),
        (E.AMLValueError, E.ErrorCode.EINVAL, (ValueError,)),
        (E.AMLTypeError, E.ErrorCode.EINVAL, (ValueError, TypeError)),
        (E.AMLDomainError, E.ErrorCode.EDOM, (ValueError,)),
        (E.AMLNotSupported, E.ErrorCode.ENOTSUP, (NotImplementedError,)),
        (E.AMLBusyError, E.ErrorCode.EBUSY, (RuntimeError,)),
        (E.AMLPermissionError, E.ErrorCode.EPERM, (PermissionError,)),
    ],
)
def test_hierarchy(cls: type[E.AMLError], code: E.ErrorCode, builtins: tuple[type[Exception], ...]) -> None:
    err = cls()
    assert err.code is code
    assert isinstance(err, E.AMLError)
    assert all(isinstance(err, b) for b in builtins)
    assert str(err) == E.strerror(code)
    assert E.error_class(code) is (E.AMLValueError if cls is E.AMLTypeError else cls)


def test_table_translates_and_never_reports_success() -> None:
    table = E.ErrorTable(
        "demo",
        {2: E.ErrorCode.ENOMEM, 101: E.ErrorCode.EINVAL},
        name=lambda c: {2: "demoOOM"}.get(c, f"demo{c}"),
    )
    table.check("demoMalloc", 0)
    with pytest.raises(E.AMLMemoryError) as info:
        table.check("demoMalloc", 2)
    native = info.value.native
    assert native == E.NativeCause("demo", "demoMalloc", 2, "demoOOM")
    assert "demoMalloc returned demoOOM (2)" in str(info.value)
    with pytest.raises(E.AMLFailure) as unknown:
        table.check("demoFree", 12345)
    assert unknown.value.code is E.ErrorCode.FAILURE
    assert table.translate(-7) is E.ErrorCode.FAILURE


def test_table_refuses_to_map_to_success() -> None:
    with pytest.raises(ValueError, match="SUCCESS"):
        E.ErrorTable("bad", {5: E.ErrorCode.SUCCESS})


def test_a_raising_name_function_does_not_hide_the_error() -> None:
    def boom(code: int) -> str:
        raise KeyError(code)

    err = E.ErrorTable("demo", {}, name=boom).error("f", 9)
    assert err.native is not None
    assert err.native.name == "error 9"


def test_errors_pickle_with_their_cause() -> None:
    err = E.ErrorTable("demo", {2: E.ErrorCode.ENOMEM}).error("demoMalloc", 2, "custom text")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is E.AMLMemoryError
    assert back.native == err.native
    assert str(back) == str(err)


def test_make_error_for_success_is_failure() -> None:
    assert isinstance(E.make_error(0), E.AMLFailure)
