"""The annotation types each analyzer declares: what the registry lists, and the contract
page's table (docs/reference/contract.md, section 4) says the same."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from analyzers.engine.base import Analyzer
from analyzers.engine.builtin.custom_judge import JudgeDefinition, judge_from_dict
from analyzers.engine.guardrails.context import LABELS
from analyzers.engine.registry import Registry, build_registry, builtin_ids

CONTRACT_DOC = Path(__file__).resolve().parents[3] / "docs" / "reference" / "contract.md"
JUDGE = {
    "analyzer_id": "legal_advice",
    "name": "Legal advice",
    "category": "compliance",
    "prompt_template": "Does this answer give legal advice?\n$response",
}


def contract_table() -> dict[str, list[str]]:
    """Section 4's table: analyzer id -> the codes of its second column."""
    text = CONTRACT_DOC.read_text()
    section = text[text.index("## 4. ") : text.index("## 5. ")]
    table: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not re.fullmatch(r"`\w+`", cells[0]):
            continue
        table[cells[0].strip("`")] = re.findall(r"`(\w+)`", cells[1])
    return table


def declared() -> dict[str, list[str]]:
    return {a.id: list(a.annotation_types) for a in build_registry(include_entry_points=False)}


def test_every_built_in_analyzer_declares_its_types():
    assert all(declared().values())


def test_the_contract_table_lists_exactly_the_declared_types():
    table = contract_table()
    assert table, "no table in section 4 of docs/reference/contract.md"
    for analyzer_id, types in declared().items():
        assert sorted(table.get(analyzer_id, [])) == sorted(types), (
            f"{analyzer_id}: the contract page lists {table.get(analyzer_id)}, "
            f"the analyzer declares {types}"
        )
    assert set(table) == set(declared()), "the contract page lists an analyzer that is not built in"


def test_each_guardrail_code_belongs_to_one_analyzer():
    owners = [t for i in ("links", "grounding", "prompt_leak") for t in declared()[i]]
    assert sorted(owners) == sorted(LABELS)


class Echo(Analyzer):
    id = "echo"
    category = "test"
    annotation_types = ("ECHO", "EMPTY_OUTPUT")

    async def analyze(self, audit, settings, context):
        return self.result(score=0.0)


def test_the_registry_lists_declared_types_in_order_each_once():
    registry = build_registry([f"{__name__}.Echo"], include_entry_points=False)
    types = registry.annotation_types()
    assert types[0] == "EMPTY_OUTPUT" and types[-1] == "ECHO"
    assert len(types) == len(set(types))
    assert Registry().annotation_types() == []


def test_a_custom_judge_declares_the_type_it_records_without_one():
    assert judge_from_dict(JUDGE).annotation_types == ("legal_advice",)
    judge = judge_from_dict(JUDGE | {"default_type": "LEGAL_ADVICE"})
    assert judge.annotation_types == ("LEGAL_ADVICE",)
    assert Registry([judge]).annotation_types() == ["LEGAL_ADVICE"]


@pytest.mark.parametrize("analyzer_id", builtin_ids())
def test_no_custom_judge_takes_a_built_in_analyzers_id(analyzer_id):
    with pytest.raises(ValidationError, match="built-in analyzer"):
        JudgeDefinition.model_validate(JUDGE | {"analyzer_id": analyzer_id})
