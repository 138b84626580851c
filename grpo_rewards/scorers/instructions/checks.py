"""IFEval's 25 verifiable instructions: one table of types, each with its kwargs model and check.

Each check follows the instruction's published definition (Zhou et al., 2023, "Instruction-Following
Evaluation for Large Language Models") with the counting rules of the reference checker, so verdicts
agree with it; where they differ on purpose (a string kwarg is matched as text, never as a regular
expression; a response whose language cannot be detected does not pass a language instruction),
docs/scorers.md lists the cases. A check returns (followed, why).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from grpo_rewards.patterns import LazyPattern
from grpo_rewards.scorer import ParamsModel
from grpo_rewards.scorers.instructions import nlp

Relation = Literal["less than", "at least"]
Count = Annotated[int, Field(ge=1, le=1_000_000)]
Word = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
Text = Annotated[str, StringConstraints(min_length=1)]  # kept as given: the reference does not strip these
Verdict = tuple[bool, str]


class _Kwargs(ParamsModel):
    model_config = ConfigDict(frozen=True)


class NoKwargs(_Kwargs):
    """No kwargs."""


def _compare(count: int, relation: str, threshold: int, what: str) -> Verdict:
    followed = count < threshold if relation == "less than" else count >= threshold
    return followed, f"{count} {what}, wanted {relation} {threshold}"


# keywords

class KeywordsKwargs(_Kwargs):
    keywords: list[Text] = Field(min_length=1, description="Each must appear (case-insensitive, as a substring).")


def keywords_existence(text: str, k: KeywordsKwargs) -> Verdict:
    missing = [w for w in k.keywords if not re.search(re.escape(w), text, re.IGNORECASE)]
    return not missing, f"missing {missing}" if missing else "all keywords present"


class KeywordFrequencyKwargs(_Kwargs):
    keyword: Word = Field(description="Counted case-insensitively, as non-overlapping substrings.")
    frequency: Count = Field(description="Threshold on the count.")
    relation: Relation = Field(description="`less than` or `at least` the frequency.")


def keyword_frequency(text: str, k: KeywordFrequencyKwargs) -> Verdict:
    count = len(re.findall(re.escape(k.keyword), text, re.IGNORECASE))
    return _compare(count, k.relation, k.frequency, f"occurrences of {k.keyword!r}")


class ForbiddenWordsKwargs(_Kwargs):
    forbidden_words: list[Text] = Field(min_length=1, description="None may appear as a whole word "
                                        "(case-insensitive).")


def forbidden_words(text: str, k: ForbiddenWordsKwargs) -> Verdict:
    found = sorted({w for w in k.forbidden_words if re.search(rf"\b{re.escape(w)}\b", text, re.IGNORECASE)})
    return not found, f"uses {found}" if found else "no forbidden word"


class LetterFrequencyKwargs(_Kwargs):
    letter: str = Field(pattern=r"^[A-Za-z]$", description="One ASCII letter, counted case-insensitively.")
    let_frequency: Count = Field(description="Threshold on the count.")
    let_relation: Relation = Field(description="`less than` or `at least` the frequency.")


def letter_frequency(text: str, k: LetterFrequencyKwargs) -> Verdict:
    letter = k.letter.lower()
    return _compare(text.lower().count(letter), k.let_relation, k.let_frequency, f"letters {letter!r}")


# language

class LanguageKwargs(_Kwargs):
    language: str = Field(description="ISO 639-1 code as langdetect names it (`en`, `de`, `zh-cn`, ...).")

    @field_validator("language")
    @classmethod
    def _known(cls, code: str) -> str:
        if code not in nlp.supported_languages():
            raise ValueError(f"language {code!r} is not one langdetect detects "
                             f"({', '.join(sorted(nlp.supported_languages()))})")
        return code


def response_language(text: str, k: LanguageKwargs) -> Verdict:
    found = nlp.detect_language(text)
    return found == k.language, f"detected {found or 'nothing'}, wanted {k.language}"


# length

class SentencesKwargs(_Kwargs):
    num_sentences: Count = Field(description="Threshold on the number of sentences (Punkt, English model).")
    relation: Relation = Field(description="`less than` or `at least`.")


def number_sentences(text: str, k: SentencesKwargs) -> Verdict:
    return _compare(len(nlp.sentences(text)), k.relation, k.num_sentences, "sentences")


class ParagraphsKwargs(_Kwargs):
    num_paragraphs: Count = Field(description="Exact number of paragraphs separated by `***`.")


def number_paragraphs(text: str, k: ParagraphsKwargs) -> Verdict:
    parts = re.split(r"\s?\*\*\*\s?", text)
    inner_empty = any(not p.strip() for p in parts[1:-1])
    if inner_empty:
        return False, "an empty paragraph between two `***` dividers"
    count = sum(1 for p in parts if p.strip())
    return count == k.num_paragraphs, f"{count} paragraphs, wanted {k.num_paragraphs}"


class WordsKwargs(_Kwargs):
    num_words: Count = Field(description="Threshold on the number of words (runs of word characters).")
    relation: Relation = Field(description="`less than` or `at least`.")


def number_words(text: str, k: WordsKwargs) -> Verdict:
    return _compare(nlp.count_words(text), k.relation, k.num_words, "words")


class NthParagraphKwargs(_Kwargs):
    num_paragraphs: Count = Field(description="Exact number of non-empty paragraphs separated by a blank line (`\\n\\n`).")
    nth_paragraph: Count = Field(description="Which paragraph (from 1) must start with `first_word`.")
    first_word: Text = Field(description="Compared case-insensitively, with leading quotes and trailing "
                             "punctuation dropped.")


    @model_validator(mode="after")
    def _nth_within(self) -> NthParagraphKwargs:
        if self.nth_paragraph > self.num_paragraphs:
            raise ValueError(f"nth_paragraph {self.nth_paragraph} is past num_paragraphs {self.num_paragraphs}")
        return self


_FIRST_WORD_STOP = LazyPattern(re.compile, r"[.,?!'\"]")


def nth_paragraph_first_word(text: str, k: NthParagraphKwargs) -> Verdict:
    parts = text.split("\n\n")
    count = sum(1 for p in parts if p.strip())
    # Paragraph n is the n-th piece of the split, empty pieces included (the reference's indexing).
    if k.nth_paragraph > count or not parts[k.nth_paragraph - 1].strip():
        return False, f"no paragraph {k.nth_paragraph} ({count} paragraphs)"
    word = parts[k.nth_paragraph - 1].split()[0].lstrip("'").lstrip('"')
    first = _FIRST_WORD_STOP.split(word, maxsplit=1)[0].lower()
    followed = count == k.num_paragraphs and first == k.first_word.lower()
    return followed, f"{count} paragraphs (wanted {k.num_paragraphs}); paragraph {k.nth_paragraph} starts with {first!r}"


# detectable content

class PlaceholdersKwargs(_Kwargs):
    num_placeholders: Count = Field(description="Minimum number of `[placeholder]`s.")


def number_placeholders(text: str, k: PlaceholdersKwargs) -> Verdict:
    count = len(re.findall(r"\[.*?\]", text))
    return count >= k.num_placeholders, f"{count} placeholders, wanted at least {k.num_placeholders}"


class PostscriptKwargs(_Kwargs):
    postscript_marker: Word = Field(description="`P.S.` or `P.P.S` (spacing between the letters is free), or "
                                    "any other marker, found case-insensitively.")


_PS_PATTERNS = {"P.P.S": LazyPattern(re.compile, r"p\.\s?p\.\s?s"), "P.S.": LazyPattern(re.compile, r"p\.\s?s\.")}


def postscript(text: str, k: PostscriptKwargs) -> Verdict:
    lowered = text.lower()
    pattern = _PS_PATTERNS.get(k.postscript_marker)
    found = pattern.search(lowered) if pattern else k.postscript_marker.lower() in lowered
    return bool(found), f"postscript marker {k.postscript_marker!r} {'found' if found else 'missing'}"


# detectable format

class BulletsKwargs(_Kwargs):
    num_bullets: Count = Field(description="Exact number of markdown bullet lines (`* item` or `- item`).")


_STAR_BULLET = LazyPattern(re.compile, r"^\s*\*[^*].*$", re.MULTILINE)
_DASH_BULLET = LazyPattern(re.compile, r"^\s*-.*$", re.MULTILINE)


def number_bullet_lists(text: str, k: BulletsKwargs) -> Verdict:
    count = len(_STAR_BULLET.findall(text)) + len(_DASH_BULLET.findall(text))
    return count == k.num_bullets, f"{count} bullets, wanted {k.num_bullets}"


CONSTRAINED_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


def constrained_response(text: str, k: NoKwargs) -> Verdict:
    found = next((o for o in CONSTRAINED_OPTIONS if o in text), None)
    return found is not None, f"contains {found!r}" if found else "none of the options"


class HighlightsKwargs(_Kwargs):
    num_highlights: Count = Field(description="Minimum number of `*highlighted*` (or `**bold**`) spans.")


def number_highlighted_sections(text: str, k: HighlightsKwargs) -> Verdict:
    single = sum(1 for h in re.findall(r"\*[^\n*]*\*", text) if h.strip("*").strip())
    double = sum(1 for h in re.findall(r"\*\*[^\n*]*\*\*", text) if h[2:-2].strip())
    count = single + double
    return count >= k.num_highlights, f"{count} highlighted sections, wanted at least {k.num_highlights}"


class SectionsKwargs(_Kwargs):
    section_spliter: Word = Field(description="The word that opens each section, followed by its number "
                                  "(`Section 1`); the dataset's spelling of the key.")
    num_sections: Count = Field(description="Minimum number of sections.")


def multiple_sections(text: str, k: SectionsKwargs) -> Verdict:
    count = len(re.findall(rf"\s?{re.escape(k.section_spliter)}\s?\d+\s?", text))
    return count >= k.num_sections, f"{count} sections, wanted at least {k.num_sections}"


_FENCE_OPENINGS = ("```json", "```Json", "```JSON", "```")


def json_format(text: str, k: NoKwargs) -> Verdict:
    body = text.strip()
    for opening in _FENCE_OPENINGS:  # each in turn, as the reference does
        body = body.removeprefix(opening)
    body = body.removesuffix("```").strip()
    try:
        json.loads(body)
    except ValueError as exc:
        return False, f"not JSON: {exc}"
    return True, "parses as JSON"


def title(text: str, k: NoKwargs) -> Verdict:
    found = any(t.lstrip("<").rstrip(">").strip() for t in re.findall(r"<<[^\n]+>>", text))
    return found, "has a <<title>>" if found else "no <<title>>"


# combination

def two_responses(text: str, k: NoKwargs) -> Verdict:
    parts = text.split("******")
    if any(not p.strip() for p in parts[1:-1]):
        return False, "an empty response between two `******` separators"
    answers = [p.strip() for p in parts if p.strip()]
    if len(answers) != 2:
        return False, f"{len(answers)} responses, wanted 2"
    return answers[0] != answers[1], "two different responses" if answers[0] != answers[1] else "the two are equal"


class RepeatPromptKwargs(_Kwargs):
    prompt_to_repeat: Word = Field(description="The request the response must start with, word for word "
                                   "(case-insensitive).")


def repeat_prompt(text: str, k: RepeatPromptKwargs) -> Verdict:
    followed = text.strip().lower().startswith(k.prompt_to_repeat.lower())
    return followed, "starts with the request" if followed else "does not start with the request"


# start / end

class EndKwargs(_Kwargs):
    end_phrase: Word = Field(description="The phrase the response ends with (case-insensitive; surrounding "
                             "double quotes are ignored).")


def end_checker(text: str, k: EndKwargs) -> Verdict:
    followed = text.strip().strip('"').lower().endswith(k.end_phrase.lower())
    return followed, "ends with the phrase" if followed else "does not end with the phrase"


def quotation(text: str, k: NoKwargs) -> Verdict:
    body = text.strip()
    followed = len(body) > 1 and body[0] == body[-1] == '"'
    return followed, "wrapped in double quotes" if followed else "not wrapped in double quotes"


# change case

class CapitalWordsKwargs(_Kwargs):
    capital_frequency: Count = Field(description="Threshold on the number of all-capital words (NLTK tokens).")
    capital_relation: Relation = Field(description="`less than` or `at least`.")


def capital_word_frequency(text: str, k: CapitalWordsKwargs) -> Verdict:
    count = nlp.count_capital_words(text)
    return _compare(count, k.capital_relation, k.capital_frequency, "all-capital words")


def _case_and_english(text: str, cased: bool, case: str) -> Verdict:
    if not cased:
        return False, f"not all {case}"
    found = nlp.detect_language(text)
    return found == "en", f"all {case}; detected {found or 'nothing'}, wanted en"


def english_capital(text: str, k: NoKwargs) -> Verdict:
    return _case_and_english(text, text.isupper(), "capitals")


def english_lowercase(text: str, k: NoKwargs) -> Verdict:
    return _case_and_english(text, text.islower(), "lowercase")


def no_comma(text: str, k: NoKwargs) -> Verdict:
    count = text.count(",")
    return count == 0, f"{count} commas"


@dataclass(frozen=True)
class InstructionType:
    """One verifiable instruction: its IFEval id, kwargs model and check."""

    id: str
    kwargs: type[BaseModel]
    check: Callable[[str, BaseModel], Verdict]
    description: str


INSTRUCTION_TYPES: dict[str, InstructionType] = {t.id: t for t in (
    InstructionType("keywords:existence", KeywordsKwargs, keywords_existence, "Include the keywords."),
    InstructionType("keywords:frequency", KeywordFrequencyKwargs, keyword_frequency, "A word appears less than / at least N times."),
    InstructionType("keywords:forbidden_words", ForbiddenWordsKwargs, forbidden_words, "Do not use these words."),
    InstructionType("keywords:letter_frequency", LetterFrequencyKwargs, letter_frequency,
                    "A letter appears less than / at least N times."),
    InstructionType("language:response_language", LanguageKwargs, response_language, "The whole response is in a language."),
    InstructionType("length_constraints:number_sentences", SentencesKwargs, number_sentences,
                    "Less than / at least N sentences."),
    InstructionType("length_constraints:number_paragraphs", ParagraphsKwargs, number_paragraphs,
                    "Exactly N paragraphs separated by `***`."),
    InstructionType("length_constraints:number_words", WordsKwargs, number_words, "Less than / at least N words."),
    InstructionType("length_constraints:nth_paragraph_first_word", NthParagraphKwargs, nth_paragraph_first_word,
                    "N paragraphs separated by blank lines; paragraph i starts with a word."),
    InstructionType("detectable_content:number_placeholders", PlaceholdersKwargs, number_placeholders,
                    "At least N `[placeholders]`."),
    InstructionType("detectable_content:postscript", PostscriptKwargs, postscript, "A postscript starting with a marker."),
    InstructionType("detectable_format:number_bullet_lists", BulletsKwargs, number_bullet_lists,
                    "Exactly N markdown bullet points."),
    InstructionType("detectable_format:constrained_response", NoKwargs, constrained_response,
                    "Answer with one of: My answer is yes. / no. / maybe."),
    InstructionType("detectable_format:number_highlighted_sections", HighlightsKwargs, number_highlighted_sections,
                    "At least N `*highlighted*` sections."),
    InstructionType("detectable_format:multiple_sections", SectionsKwargs, multiple_sections,
                    "At least N sections, each opened by `SPLITTER n`."),
    InstructionType("detectable_format:json_format", NoKwargs, json_format, "The whole output is JSON (fences allowed)."),
    InstructionType("detectable_format:title", NoKwargs, title, "A title in double angular brackets, `<<title>>`."),
    InstructionType("combination:two_responses", NoKwargs, two_responses,
                    "Two different responses separated by `******`."),
    InstructionType("combination:repeat_prompt", RepeatPromptKwargs, repeat_prompt, "Repeat the request first, then answer."),
    InstructionType("startend:end_checker", EndKwargs, end_checker, "End with an exact phrase."),
    InstructionType("startend:quotation", NoKwargs, quotation, "Wrap the whole response in double quotes."),
    InstructionType("change_case:capital_word_frequency", CapitalWordsKwargs, capital_word_frequency,
                    "All-capital words appear less than / at least N times."),
    InstructionType("change_case:english_capital", NoKwargs, english_capital, "English, all capital letters."),
    InstructionType("change_case:english_lowercase", NoKwargs, english_lowercase, "English, all lowercase letters."),
    InstructionType("punctuation:no_comma", NoKwargs, no_comma, "No commas."),
)}
