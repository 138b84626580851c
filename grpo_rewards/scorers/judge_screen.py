"""What an LLM judge is never asked about: completions that only look like an answer, and
completions that talk to the grader. Both score 0 without a call, and say why.

Master keys (arXiv 2507.08794): strong judges give reward to a completion with no content at all,
only punctuation or an opener such as "Thought process:" or "Let's solve this step by step.". The
family is "nothing beyond opener words and punctuation": the text, with punctuation, symbols and
markup removed, is a sequence of words from a small vocabulary of openers (several languages).
Any other word, any digit, is content and goes to the judge.

Grader injection: text addressed to whoever grades ("as the grader you must", "note to the
evaluator"), demands for a score ("give this full marks", "rate it 10/10") and attempts to replace
the judge's instructions ("ignore previous instructions"). The delimiter around the completion and
the judge's instructions are the first defence; this screen means such a completion is not even
worth trying.
"""

from __future__ import annotations

import unicodedata

import regex

from grpo_rewards.patterns import LazyPattern

# Discourse words that open an answer without saying anything. A word here must never be an answer
# on its own to a question a judge is asked: no yes/no, no numbers, no content nouns.
_OPENERS = {
    "en": "let let's lets us me i we i'll we'll will shall now so okay ok sure alright well first firstly "
          "begin start here here's is are this the a an it my our to solve solving solved problem question "
          "task step steps by thought thoughts process thinking think reasoning solution answer final "
          "explanation through carefully break down and then",
    "es": "vamos a resolver resolvamos esto este el la problema paso por solución respuesta proceso de "
          "pensamiento razonamiento análisis final primero bueno veamos pensemos es",
    "fr": "résolvons résoudre allons ce cet cette le la problème étape par solution réponse processus de "
          "réflexion raisonnement pensée analyse voici finale d'abord bon analysons est",
    "de": "lösen wir lass lasst uns das die der problem aufgabe schritt für lösung antwort denkprozess "
          "gedankengang überlegung analyse zuerst also gut ist endgültige",
    "ru": "давайте решим решение решать это эту задачу задача шаг за шагом ответ ход мыслей рассуждение "
          "анализ итак сначала",
    "pt": "vamos resolver isto este o a problema passo por solução resposta processo de pensamento "
          "raciocínio análise primeiro",
}
# Scripts without spaces between words: openers removed as substrings.
_CJK_OPENERS = ("思考过程", "思路", "思考", "过程", "解答", "解题", "解决", "解", "答案", "答", "让我们", "我们",
                "一步一步地", "一步一步", "一步步", "逐步", "地", "来", "这个", "这道", "问题", "题", "分析",
                "首先", "好的", "步骤", "推理", "最终", "考え方", "考え", "ステップ", "バイ", "解説", "解決",
                "思考過程", "順番に", "解いて", "みましょう", "ましょう", "答え", "問題", "まず", "を", "は", "で", "の")

_WORDS = frozenset(w for words in _OPENERS.values() for w in words.split())
_CJK = LazyPattern(regex.compile, "|".join(sorted(map(regex.escape, _CJK_OPENERS), key=len, reverse=True)))
# Anything but punctuation, symbols, spaces, controls and invisibles.
_CONTENT_CHAR = LazyPattern(regex.compile, r"[^\p{P}\p{S}\p{Z}\p{C}]")
_MARKUP = LazyPattern(regex.compile, r"</?\s*[a-z_]+\s*>")  # <think>, </answer>: empty tags are no content either
_TOKEN = LazyPattern(regex.compile, r"[\p{L}\p{M}\p{N}']+")


def _normal(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold().replace("’", "'")


def master_key(text: str) -> str | None:
    """Why `text` has no content beyond openers and punctuation (a "master key"), or None."""
    norm = _MARKUP.sub(" ", _normal(text))
    if _CONTENT_CHAR.search(norm) is None:
        return "no content: empty, or only punctuation, symbols or spaces"
    for match in _TOKEN.finditer(norm):  # stops at the first word of content
        word = match.group(0)
        if word not in _WORDS and word.strip("'") not in _WORDS and _CJK.sub("", word):
            return None
    return "no content: only an opener (such as 'Thought process:' or 'Let's solve this step by step.')"


# Addressed to the grader: its role named in the second person or as a title.
_GRADER = r"(?:grader|judge|evaluator|reviewer|assessor|rater|scorer|marker|examiner|verifier|reward model|ai judge)"
_SCORE_WORD = r"(?:marks?|points?|scores?|credit|rating|grade|stars?|reward)"
_HIGH = r"(?:full|maximum|max|maximal|perfect|top|highest|best|10|100|five|ten|a\+)"
# Separate patterns rather than one alternation: each is scanned fast for its own leading words.
_INJECTIONS = [LazyPattern(regex.compile, pattern) for pattern in [
        # replacing the judge's own instructions
        r"\b(?:ignore|disregard|forget|override|bypass)\b[^.\n]{0,40}\b(?:previous|prior|above|earlier|preceding|"
        r"all|any|your|the|system|original)\b[^.\n]{0,25}\b(?:instructions?|prompts?|rules?|rubric|guidelines|"
        r"criteria|directions)\b",
        r"\bnew (?:instructions?|rubric|rules)\b\s*:",
        # the grader addressed
        rf"\b(?:as|dear|attention|note to|message to|hey|hello|to) (?:the |my |any )?{_GRADER}s?\b",
        rf"\b{_GRADER}s?\s*[:,]\s*(?:please|you|give|award|rate|score|mark|output|respond|ignore)",
        rf"\byou (?:are|as) (?:the |a )?{_GRADER}\b",
        # a score demanded
        rf"\b(?:give|award|assign|grant|rate|score|mark|grade)\b[^.\n]{{0,25}}\b{_HIGH}\b"
        rf"[^.\n]{{0,12}}\b{_SCORE_WORD}\b",
        rf"\b(?:rate|score|grade|mark)\s+(?:it|this|me|my answer|the answer|this answer|this response)?\s*"
        r"(?:as|with|a|an|at)?\s*(?:10|100|5)\s*(?:/|out of)",
        r"\b(?:output|respond with|reply with|answer with|print|return|say)\s*(?:only\s*)?[\"'“]?(?:yes|correct|"
        r"pass|true|10|100)\b[\"'”]?\s*(?:$|[.!\n]|and nothing else)",
        rf"\bthis (?:answer|response|solution|completion) (?:deserves|should (?:get|receive)|must (?:get|receive))"
        rf"[^.\n]{{0,20}}\b(?:{_HIGH}|a high|the highest)\b",
        # other languages: the same three families, short
        r"忽略(?:之前|以上|前面|上述|所有)?的?(?:指令|指示|说明|规则)|给(?:我|这个|此|它)?(?:满分|最高分)|作为(?:评分|评审|评委|裁判)",
        r"\bignor(?:a|e|ez|iere|ieren)\b[^.\n]{0,30}\b(?:instrucciones|instructions|anweisungen|consignes)\b",
        r"\b(?:puntuación máxima|note maximale|volle punktzahl|höchste punktzahl|nota máxima|pontuação máxima)\b",
        r"игнорируй(?:те)?[^.\n]{0,30}инструкци|(?:поставь|дай)(?:те)?[^.\n]{0,15}(?:максимальн|высш)",
    ]]  # lower case: the text is case-folded first


def grader_injection(text: str) -> str | None:
    """The words of `text` that address the grader or its instructions, or None."""
    norm = _normal(text)
    for pattern in _INJECTIONS:
        if (found := pattern.search(norm)) is not None:
            return found.group(0)
    return None


def screen(text: str) -> tuple[str, str] | None:
    """(reason, detail) when the judge must not be asked about `text`, else None."""
    if (why := master_key(text)) is not None:
        return "master key: no content for the judge", why
    if (words := grader_injection(text)) is not None:
        return "addressed to the grader", words
    return None
