"""hpkctl.typed: annotations as validation rules, with pydantic's error types, locations and texts
(hpkctl/pod/validation.py and hpkctl/sites/validation.py build the messages users see from them)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest

from hpkctl.typed import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    RuleError,
    ValidationError,
    field_validator,
    model_validator,
    to_camel,
)


def _even(v: int) -> int:
    if v % 2:
        raise RuleError("k8s_rule", "must be even", {"hint": "add one"})
    return v


def _strip(v: Any) -> Any:
    return v.strip() if isinstance(v, str) else v


class Camel(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, alias_generator=to_camel, strict=True, frozen=True)


class Leaf(Camel):
    port_number: Annotated[int, AfterValidator(_even)]
    host_name: Annotated[str, BeforeValidator(_strip), Field(min_length=1)] | None = None


class Tree(Camel):
    leaves: Annotated[list[Leaf], Field(min_length=1, max_length=3)]
    kind: Literal["A", "B", "C"] | None = None
    port: int | str | None = None
    labels: dict[str, str] | None = None
    later: Later | None = None  # resolved on first validation, after Later is defined
    downward: Leaf | None = Field(None, alias="downwardAPI")


class Later(Camel):
    flag: bool = False


def errors(cls: type[BaseModel], data: Any) -> list[tuple[str, tuple[Any, ...], str]]:
    with pytest.raises(ValidationError) as err:
        cls.model_validate(data)
    return [(e["type"], e["loc"], e["msg"]) for e in err.value.errors()]


def test_aliases_names_extras_and_nesting() -> None:
    t = Tree.model_validate({"leaves": [{"portNumber": 2, "host_name": " h "}], "later": {"flag": True},
                             "downwardAPI": {"portNumber": 4}, "status": {"phase": "x"}})
    assert t.leaves[0].port_number == 2 and t.leaves[0].host_name == "h"  # camelCase or the field's name
    assert t.later is not None and t.later.flag is True and t.downward is not None and t.downward.port_number == 4
    assert t.model_extra == {"status": {"phase": "x"}} and t.leaves[0].model_extra == {}
    assert Tree.model_fields["downward"].alias == "downwardAPI" and Tree.model_fields["kind"].annotation is not None
    dumped = t.model_dump(by_alias=True, exclude_none=True)
    assert dumped["leaves"] == [{"portNumber": 2, "hostName": "h"}] and dumped["status"] == {"phase": "x"}


def test_strict_types_and_every_error_at_once() -> None:
    got = errors(Tree, {"leaves": [{"portNumber": "2"}, {"portNumber": True}, {}, "x"], "kind": "D", "port": 1.5,
                        "labels": {"a": 1, 2: "b"}})
    assert got == [
        ("too_long", ("leaves",), "List should have at most 3 items after validation, not 4"),
        ("literal_error", ("kind",), "Input should be 'A', 'B' or 'C'"),
        ("int_type", ("port", "int"), "Input should be a valid integer"),
        ("string_type", ("port", "str"), "Input should be a valid string"),
        ("string_type", ("labels", "a"), "Input should be a valid string"),
        ("string_type", ("labels", 2, "[key]"), "Input should be a valid string"),
    ]
    assert errors(Tree, {"leaves": [{"portNumber": "2"}, {"portNumber": True}, {}, "x"][:3]}) == [
        ("int_type", ("leaves", 0, "portNumber"), "Input should be a valid integer"),
        ("int_type", ("leaves", 1, "portNumber"), "Input should be a valid integer"),  # bool is no int
        ("missing", ("leaves", 2, "portNumber"), "Field required"),
    ]
    assert errors(Tree, {"leaves": [], 1: "x"}) == [
        ("too_short", ("leaves",), "List should have at least 1 item after validation, not 0"),
        ("invalid_key", (1,), "Keys should be strings")]
    assert errors(Tree, {"leaves": "x"}) == [("list_type", ("leaves",), "Input should be a valid list")]
    assert errors(Tree, ["x"]) == [("model_type", (), "Input should be a valid dictionary or instance of Tree")]


def test_rules_keep_their_type_message_and_context() -> None:
    with pytest.raises(ValidationError) as err:
        Leaf.model_validate({"portNumber": 3, "hostName": "  "})
    odd, empty = err.value.errors()
    assert (odd["type"], odd["msg"], odd["ctx"], odd["input"]) == ("k8s_rule", "must be even", {"hint": "add one"}, 3)
    # a length after a validator function is worded as pydantic does ("Value"), which the pod messages rely on
    assert (empty["type"], empty["msg"]) == ("too_short", "Value should have at least 1 item after validation, not 0")


def test_frozen_copies_and_equality() -> None:
    leaf = Leaf.model_validate({"portNumber": 2})
    with pytest.raises(AttributeError):
        leaf.port_number = 4  # type: ignore[misc]
    other = leaf.model_copy(update={"port_number": 4})
    assert (leaf.port_number, other.port_number) == (2, 4) and other != leaf
    assert leaf == Leaf(port_number=2) and Leaf.model_validate(leaf) is leaf


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    low: int = Field(1, ge=1, description="the low end")
    high: int = Field(2, ge=1)
    names: list[str] = Field(default_factory=list)
    rate: float = Field(1.0, gt=0)

    @field_validator("names")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        if "" in v:
            raise ValueError("an empty name")
        return v

    @model_validator(mode="after")
    def _ordered(self) -> Section:
        if self.low > self.high:
            raise ValueError(f"low {self.low} is above high {self.high}")
        return self


def test_sections_forbid_unknown_keys_and_run_validators() -> None:
    assert Section() == Section.model_validate({}) and Section().names == [] and Section(rate=2).rate == 2
    assert Section.model_fields["low"].description == "the low end"
    assert Section.model_fields["names"].get_default(call_default_factory=True) == []
    assert errors(Section, {"low": 0, "names": [""], "rate": 0, "typo": 1}) == [
        ("greater_than_equal", ("low",), "Input should be greater than or equal to 1"),
        ("value_error", ("names",), "Value error, an empty name"),
        ("greater_than", ("rate",), "Input should be greater than 0"),
        ("extra_forbidden", ("typo",), "Extra inputs are not permitted"),
    ]
    assert errors(Section, {"low": 3}) == [("value_error", (), "Value error, low 3 is above high 2")]
    with pytest.raises(ValidationError, match="low 3 is above high 2"):
        Section(low=3)
    assert errors(Section, {"rate": True}) == [("float_type", ("rate",), "Input should be a valid number")]


def test_to_camel_is_pydantics() -> None:
    assert [to_camel(n) for n in ("termination_grace_period_seconds", "ip", "host_ip", "already")] == \
        ["terminationGracePeriodSeconds", "ip", "hostIp", "already"]


def test_a_model_whose_annotations_python_keeps_lazy_is_refused_not_left_without_fields() -> None:
    """Python 3.14 leaves a class body without ``from __future__ import annotations`` an ``__annotate__``
    function instead of ``__annotations__``: such a model would have no fields (and with extra="allow"
    accept anything), so it is refused when the class is made (found in review)."""
    with pytest.raises(TypeError, match="from __future__ import annotations"):
        type(BaseModel)("Lazy", (BaseModel,), {"__module__": __name__, "__annotate__": lambda fmt: {"x": int}})
