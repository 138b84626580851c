"""A real `grpo-rewards serve` refuses requests without a field its spec reads (422 naming it), on
the native endpoint and on OpenRLHF's, where missing or empty `labels` used to score 0 silently."""

from __future__ import annotations

import math

import pytest
from _serve_helpers import Server, get, post, spec_file

pytest.importorskip("fastapi")
pytestmark = pytest.mark.timeout(300)

SOLUTION_SPEC = ("scorers:\n"
                 "  - scorer: math_accuracy\n    name: correct\n    params: {workers: 1, answer_field: solution}\n"
                 "  - scorer: think_format\n    name: format\n    weight: 0.2\n")
RIGHT = "<think>6 times 7</think>\n<answer>42</answer>"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(spec_file(tmp_path_factory.mktemp("spec"), SOLUTION_SPEC)) as running:
        yield running


def test_native_score_without_the_field_is_422_naming_it(server):
    status, body, _ = post(server.url + "/score", {"samples": [{"completion": RIGHT, "answer": "42"}]})
    assert status == 422
    assert body["missing"] == ["solution"]
    assert "reads the field 'solution' (its `answer_field`)" in body["error"]
    assert "did you mean 'answer'? Set `answer_field: answer`" in body["error"]
    status, body, _ = post(server.url + "/score", {"samples": [{"completion": RIGHT, "solution": "42"},
                                                               {"completion": RIGHT, "solution": None}]})
    assert status == 200
    assert [r["scores"]["correct"] for r in body["results"]] == [1.0, None]  # a null row is a mask, as before


@pytest.mark.parametrize("labels", [None, ["", ""]], ids=["missing", "empty"])
def test_openrlhf_without_labels_is_422(server, labels):
    body = {"query": ["What is 6*7?" + RIGHT] * 2, "prompts": ["What is 6*7?"] * 2}
    if labels is not None:
        body["labels"] = labels
    accepted = get(server.url + "/health")[1]["requests"]["accepted"]
    status, answer, _ = post(server.url + "/openrlhf", body)
    assert status == 422, answer
    assert "the request's labels (OpenRLHF's --label_key) lacks a field" in answer["error"]
    assert answer["missing"] == ["solution"]
    # Nothing was scored: the refused requests never reached the scorers.
    assert get(server.url + "/health")[1]["requests"]["accepted"] == accepted


def test_openrlhf_labels_fill_the_field_the_spec_reads(server):
    body = {"query": ["What is 6*7?" + RIGHT, "What is 6*7?It is 41."], "prompts": ["What is 6*7?"] * 2,
            "labels": ["42", "42"]}
    status, answer, _ = post(server.url + "/openrlhf", body)
    assert status == 200
    assert answer["extra_logs"]["correct"] == [1.0, 0.0]
    assert answer["rewards"] == [1.2, 0.0] and not any(math.isnan(r) for r in answer["rewards"])
