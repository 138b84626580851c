"""The one prompt pipeline: rendering, special tokens, truncation, decoding, completion shape, and the
same token ids in a training rollout, in periodic evaluation and in `grpo-train generate`."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from _grpo_core_helpers import one_torch_thread  # noqa: E402, F401 - autouse fixture
from _tiny_models import build_tiny_llama  # noqa: E402
from tokenizers import processors  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from grpo_core import rollout  # noqa: E402
from grpo_core.config import validate_config  # noqa: E402
from grpo_core.generate import generate_completions  # noqa: E402
from grpo_core.prompts import Prompts, completion_for, eos_token_ids  # noqa: E402
from grpo_core.rollout import completion_mask  # noqa: E402
from grpo_core.trainer import Trainer  # noqa: E402
from grpo_rewards.errors import UserError  # noqa: E402
from grpo_rewards.scorer import Sample  # noqa: E402

pytestmark = pytest.mark.timeout(120)

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 3?"}]
TEXT = "What is 2 + 3? The answer is"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """The tiny Llama, its tokenizer adding a BOS (`<|im_start|>`) to plain text, as Llama's tokenizers do."""
    directory = build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))
    tokenizer = AutoTokenizer.from_pretrained(directory)
    bos = tokenizer.bos_token_id
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<|im_start|> $A", special_tokens=[("<|im_start|>", bos)])
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def tokenizer(tiny_dir):
    return AutoTokenizer.from_pretrained(tiny_dir)


def test_text_is_raw_with_the_tokenizers_special_tokens_and_chat_is_templated_without(tokenizer):
    prompts = Prompts(tokenizer)
    assert prompts.render(TEXT) == TEXT
    assert prompts.render(CHAT) == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2 + 3?"
                                    "<|im_end|>\n<|im_start|>assistant\n")
    text_ids, chat_ids = prompts.encode([TEXT, CHAT])
    # TRL 1.16: `processing_class(text=prompts)` for text (its BOS added), `apply_chat_template` for chat
    assert text_ids == tokenizer(TEXT)["input_ids"] and text_ids[0] == tokenizer.bos_token_id
    assert chat_ids == tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True,
                                                     return_dict=True)["input_ids"]
    assert chat_ids.count(tokenizer.bos_token_id) == 3  # one per turn from the template, none added on top


def test_chat_template_flag_renders_text_as_a_user_turn(tokenizer):
    prompts = Prompts(tokenizer, chat_template=True)
    assert prompts.render("hi") == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert prompts.encode(["hi"])[0] == tokenizer(prompts.render("hi"), add_special_tokens=False)["input_ids"]


def test_long_prompts_keep_their_end(tokenizer):
    full = Prompts(tokenizer).encode([CHAT])[0]
    assert Prompts(tokenizer, max_prompt_length=5).encode([CHAT])[0] == full[-5:]


def test_bad_prompts_are_clear_errors(tiny_dir):
    bare = AutoTokenizer.from_pretrained(tiny_dir)
    bare.chat_template = None
    with pytest.raises(UserError, match="no chat template"):
        Prompts(bare).encode([CHAT])
    assert Prompts(bare, chat_template=True).render("raw text") == "raw text"  # nothing to opt into
    with pytest.raises(UserError, match="text or a list of chat messages"):
        Prompts(bare).encode([42])


def test_completion_text_stops_at_the_first_eos_and_takes_the_prompts_shape(tokenizer):
    eos = tokenizer.eos_token_id
    hello = tokenizer("hello the", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([hello + [eos] + hello, hello + hello + hello[:1]])
    texts = Prompts(tokenizer).decode(ids, completion_mask(ids, torch.tensor([eos])))
    assert texts == ["hello the", tokenizer.decode(hello + hello + hello[:1])]
    samples = Prompts(tokenizer).samples([{"prompt": CHAT, "answer": "5"}, {"prompt": TEXT}], ["5", " 5"])
    assert samples[0].completion == [{"role": "assistant", "content": "5"}] and samples[0].reference == {"answer": "5"}
    assert samples[1].completion == " 5" and completion_for(TEXT, "x") == "x"
    assert Sample.from_record({"prompt": CHAT, "completion": completion_for(CHAT, "5")}).completion_text == "5"


def test_eos_ids_join_the_generation_configs_and_the_tokenizers(tokenizer):
    class Config:
        eos_token_id = [7, tokenizer.eos_token_id]

    assert eos_token_ids(Config(), tokenizer) == sorted({7, tokenizer.eos_token_id})
    Config.eos_token_id = None
    assert eos_token_ids(Config(), tokenizer) == [tokenizer.eos_token_id]


def test_the_same_row_gives_the_same_ids_in_training_eval_and_generate(tiny_dir, tmp_path, monkeypatch):
    records = [{"prompt": TEXT, "answer": "5"}, {"prompt": CHAT, "answer": "5"}]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    seen: list[tuple[str, tuple[int, ...]]] = []  # (where, prompt ids the model was given)
    where = {"now": ""}
    sample_ids = rollout._sample_ids

    def spy(model, prompt_ids, prompt_mask, *args):
        seen.extend((where["now"], tuple(row[m.bool()].tolist())) for row, m in zip(prompt_ids, prompt_mask))
        return sample_ids(model, prompt_ids, prompt_mask, *args)

    monkeypatch.setattr(rollout, "_sample_ids", spy)
    config = validate_config({
        "model": {"name_or_path": str(tiny_dir)}, "rewards": {"scorers": [{"scorer": "regex_format", "params": {"pattern": "5"}}]},
        "data": {"path": str(data), "eval_path": str(data)}, "num_generations": 2,
        "per_device_train_batch_size": 4, "max_completion_length": 4, "max_prompt_length": 64, "beta": 0.0,
        "output_dir": str(tmp_path / "run"), "progress": False, "plot": False, "device": "cpu", "seed": 0})
    trainer = Trainer(config)
    where["now"] = "train"
    trainer.make_rollout()
    where["now"] = "eval"
    trainer.evaluate()
    where["now"] = "generate"
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    generate_completions(model, AutoTokenizer.from_pretrained(tiny_dir), records, max_new_tokens=4,
                         max_prompt_length=64, progress=False)
    tokenizer = trainer.tokenizer
    text_ids = tuple(tokenizer(TEXT)["input_ids"])
    chat_ids = tuple(tokenizer(Prompts(tokenizer).render(CHAT), add_special_tokens=False)["input_ids"])
    for place in ("train", "eval", "generate"):
        assert {ids for w, ids in seen if w == place} == {text_ids, chat_ids}, place
