"""Generated (instructions, kwargs, prompt, response) cases for every IFEval instruction type.

Each builder returns kwargs and responses around the instruction's boundary: compliant, one off,
and edge cases of the definition (markup that resembles the marker, empty parts, case and spacing).
Thresholds are set from the response's own count so both sides of every boundary are hit. A share of
responses is wrapped in an intro line, an outro line and `*` emphasis, which only loose mode forgives.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

SENTENCES = [
    "The committee met on Tuesday to review the budget.", "Dr. Smith arrived at 3.30 p.m. with the report.",
    "Is this the right approach?", "We tested it twice, and it worked!", "Prices rose by 2.5 percent in March.",
    "The U.S. team finished second.", "She said \"stop here.\" Then she left.", "Wait... are you sure?",
    "Mr. Brown and Mrs. Green live on Elm St. near the park.", "It costs $4.99, e.g. less than a coffee.",
    "NASA launched the probe in 2021.", "The results, however, were mixed.", "I can't believe it's DONE.",
    "Use the API carefully; it is RATE-LIMITED.", "Section three covers the appendix.",
    "Our cat sleeps in the cathedral garden.", "Paris is the capital of France.", "Why not?",
    "The keyword appears here: keyword.", "A.B.C. Corp. reported earnings.", "This is fine.",
]
WORDS = ("apple river cloud system keyword garden python window summer coffee engine planet music "
         "market doctor answer network").split()
LANGUAGE_TEXTS = {
    "en": ["The weather is nice today and we are going to the park with our friends.",
           "Please read the instructions carefully before you start the exam."],
    "de": ["Das Wetter ist heute schön und wir gehen mit unseren Freunden in den Park.",
           "Bitte lesen Sie die Anweisungen sorgfältig, bevor Sie mit der Prüfung beginnen."],
    "fr": ["Il fait beau aujourd'hui et nous allons au parc avec nos amis.",
           "Veuillez lire attentivement les instructions avant de commencer l'examen."],
    "es": ["Hoy hace buen tiempo y vamos al parque con nuestros amigos.",
           "Por favor, lea atentamente las instrucciones antes de comenzar el examen."],
    "it": ["Oggi il tempo è bello e andiamo al parco con i nostri amici.",
           "Si prega di leggere attentamente le istruzioni prima di iniziare l'esame."],
    "pt": ["Hoje o tempo está bom e vamos ao parque com os nossos amigos.",
           "Por favor, leia atentamente as instruções antes de começar o exame."],
    "ru": ["Сегодня хорошая погода, и мы идём в парк с нашими друзьями.",
           "Пожалуйста, внимательно прочитайте инструкции перед началом экзамена."],
    "ja": ["今日は天気が良いので、友達と一緒に公園に行きます。", "試験を始める前に、説明をよく読んでください。"],
    "ko": ["오늘은 날씨가 좋아서 친구들과 함께 공원에 갑니다.", "시험을 시작하기 전에 설명을 잘 읽어 주세요."],
    "hi": ["आज मौसम अच्छा है और हम अपने दोस्तों के साथ पार्क जा रहे हैं।", "कृपया परीक्षा शुरू करने से पहले निर्देश ध्यान से पढ़ें।"],
    "ar": ["الطقس جميل اليوم ونحن ذاهبون إلى الحديقة مع أصدقائنا.", "يرجى قراءة التعليمات بعناية قبل بدء الامتحان."],
    "fi": ["Tänään on kaunis sää ja menemme puistoon ystäviemme kanssa.",
           "Lue ohjeet huolellisesti ennen kuin aloitat kokeen."],
}
INTRO, OUTRO = "Sure, here is my answer:", "Let me know if you need anything else."


@dataclass(frozen=True)
class Case:
    ids: list[str]
    kwargs: list[dict[str, Any]]
    prompt: str
    response: str


def prose(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(SENTENCES) for _ in range(n))


def near(count: int, rng: random.Random) -> int:
    return max(1, count + rng.choice((-1, 0, 0, 1)))


def relation(rng: random.Random) -> str:
    return rng.choice(("less than", "at least"))


def wrapped(rng: random.Random, text: str) -> str:
    """An intro line, an outro line, `*` emphasis: each with some chance."""
    if rng.random() < 0.5:
        text = f"{INTRO}\n{text}"
    if rng.random() < 0.5:
        text = f"{text}\n{OUTRO}"
    if rng.random() < 0.3:
        text = text.replace(" ", " *", 1).replace(".", "*.", 1)
    return text


Builder = Callable[[random.Random], tuple[dict[str, Any], list[str]]]


def _keywords(rng):
    kws = rng.sample(WORDS, rng.randint(1, 3))
    base = prose(rng, 3)
    return {"keywords": kws}, [f"{base} {' '.join(kws)}.", f"{base} {kws[0].upper()} {' '.join(kws[1:])}",
                               f"{base} {' '.join(kws[1:])}", f"{kws[-1]}s {base} {' '.join(kws[:-1])}", base]


def _frequency(rng):
    kw = rng.choice(WORDS + ["cat", "the"])
    n = rng.randint(1, 5)
    text = " ".join(rng.choice([prose(rng, 1), kw, kw.capitalize(), f"{kw}s", f"super{kw}"]) for _ in range(n + 3))
    count = text.lower().count(kw)
    return {"keyword": kw, "frequency": near(count, rng), "relation": relation(rng)}, [text, f"{kw} " * n, f"*{kw}* " * n]


def _forbidden(rng):
    words = rng.sample(WORDS + ["cat"], 2)
    base = prose(rng, 2)
    return {"forbidden_words": words}, [base, f"{base} {words[0]}.", f"{base} {words[1].upper()}!",
                                        f"{base} {words[0]}s and {words[1]}ing", f"{INTRO} {words[0]}\n{base}"]


def _letter(rng):
    letter = rng.choice("aeiostnrlx")
    text = prose(rng, rng.randint(1, 3))
    count = text.lower().count(letter)
    return ({"letter": rng.choice((letter, letter.upper())), "let_frequency": near(count, rng),
             "let_relation": relation(rng)}, [text, text.upper(), text.replace(letter, "")])


def _language(rng):
    code = rng.choice(list(LANGUAGE_TEXTS))
    other = rng.choice([c for c in LANGUAGE_TEXTS if c != code])
    mine, theirs = " ".join(LANGUAGE_TEXTS[code]), " ".join(LANGUAGE_TEXTS[other])
    return {"language": code}, [mine, theirs, f"{mine} {LANGUAGE_TEXTS[other][0]}", f"{INTRO}\n{mine}"]


def _sentences(rng):
    text = prose(rng, rng.randint(1, 6))
    count = text.count(". ") + 1
    return {"num_sentences": near(count, rng), "relation": relation(rng)}, [text, text.replace(". ", ", "), f"{text}\n\n{text}"]


def _paragraphs(rng):
    n = rng.randint(1, 4)
    parts = [prose(rng, 2) for _ in range(n)]
    sep = rng.choice((" *** ", "\n***\n", "\n\n***\n\n", "***"))
    return {"num_paragraphs": near(n, rng)}, [sep.join(parts), f"***\n{sep.join(parts)}\n***",
                                             sep.join([*parts, " "]) + "*** x", "\n\n".join(parts),
                                             f"***bold*** {sep.join(parts)}", " **** ".join(parts)]


def _words(rng):
    text = prose(rng, rng.randint(1, 5))
    count = len(text.split())
    return {"num_words": near(count, rng), "relation": relation(rng)}, [text, text.replace(" ", "-"), text + " " + text]


def _nth(rng):
    n = rng.randint(1, 4)
    nth = rng.randint(1, n)
    word = rng.choice(WORDS)
    parts = [prose(rng, 1) for _ in range(n)]
    good = list(parts)
    good[nth - 1] = rng.choice((word, f'"{word.capitalize()},', f"'{word}.", f"{word.upper()}!")) + " " + good[nth - 1]
    return ({"num_paragraphs": max(nth, near(n, rng)), "nth_paragraph": nth, "first_word": word},
            ["\n\n".join(good), "\n\n".join(parts), "\n\n" + "\n\n".join(good), "\n\n\n".join(good),
             "\n".join(good), "\n\n".join(good) + "\n\n"])


def _placeholders(rng):
    n = rng.randint(1, 4)
    text = prose(rng, 2) + " " + " ".join(f"[{rng.choice(WORDS)}]" for _ in range(n))
    return {"num_placeholders": near(n, rng)}, [text, text.replace("[", "(", 1), f"{text} [] [a\nb] [[x]]"]


def _postscript(rng):
    marker = rng.choice(("P.S.", "P.P.S"))
    base = prose(rng, 2)
    return {"postscript_marker": marker}, [f"{base}\n\n{marker} {prose(rng, 1)}", f"{base}\np. s. thanks",
                                           f"{base}\nPS thanks", f"{base}\nP.P.S. again", f"{base} p.p. s later",
                                           base]


def _bullets(rng):
    n = rng.randint(1, 5)
    items = "\n".join(f"{rng.choice(('*', '-', '  *', ' -'))} {rng.choice(SENTENCES)}" for _ in range(n))
    return {"num_bullets": near(n, rng)}, [items, f"{prose(rng, 1)}\n{items}\n---", f"{items}\n**bold line**",
                                          f"{items}\n*\n-1 is negative", items.replace("* ", "• ")]


def _constrained(rng):
    option = rng.choice(("My answer is yes.", "My answer is no.", "My answer is maybe."))
    return {}, [option, f"{prose(rng, 1)} {option}", option.lower(), option.rstrip("."), "My answer is yes!"]


def _highlights(rng):
    n = rng.randint(1, 4)
    spans = " ".join(rng.choice((f"*{w}*", f"**{w} part**")) for w in rng.sample(WORDS, n))
    return {"num_highlights": near(n, rng)}, [f"{prose(rng, 1)} {spans}", f"{spans} * * ** **", "*a\nb* ***",
                                             f"{spans.replace('*', '')}"]


def _sections(rng):
    splitter = rng.choice(("Section", "SECTION"))
    n = rng.randint(1, 4)
    body = "\n".join(f"{splitter} {i + 1}\n{prose(rng, 1)}" for i in range(n))
    return {"section_spliter": splitter, "num_sections": near(n, rng)}, [
        body, body.replace(f"{splitter} ", splitter), body.lower(), body.replace(f"{splitter} 1", f"{splitter} X")]


def _json(rng):
    obj = '{"answer": %d, "items": ["%s"]}' % (rng.randint(0, 99), rng.choice(WORDS))
    return {}, [obj, f"```json\n{obj}\n```", f"```JSON\n{obj}```", f"Here: {obj}", f"```\n{obj}\n```\nDone.",
                "{'a': 1}", '{"a": NaN}', f"```json```{obj}```", '"just a string"', "[1, 2,]"]


def _title(rng):
    return {}, [f"<<{rng.choice(WORDS)} {rng.choice(WORDS)}>>\n{prose(rng, 1)}", f"<< >> {prose(rng, 1)}",
                "<<a\nb>>", f"<<<{rng.choice(WORDS)}>>>", prose(rng, 1)]


def _two(rng):
    a, b = prose(rng, 1), prose(rng, 1)
    return {}, [f"{a}\n******\n{b}", f"{a}\n******\n{a}", f"******\n{a}\n******\n{b}\n******",
                f"{a}\n******\n******\n{b}", f"{a}\n*******\n{b}", f"{a} ****** {b} ****** {a}"]


def _repeat(rng):
    request = prose(rng, 1)
    return {"prompt_to_repeat": request}, [f"{request} {prose(rng, 1)}", f"  {request.upper()}\n{prose(rng, 1)}",
                                           f"{INTRO}\n{request}", prose(rng, 1), request[:-3]]


def _end(rng):
    phrase = rng.choice(("Is there anything else I can help with?", "Any other questions?", "Peace out."))
    base = prose(rng, 2)
    return {"end_phrase": phrase}, [f"{base} {phrase}", f'"{base} {phrase}"', f"{base} {phrase.lower()}  \n",
                                    f"{base} {phrase}!", f"{base}{phrase}", f"{phrase} {base}",
                                    f"{base} {phrase}\n{OUTRO}"]


def _quotation(rng):
    base = prose(rng, 1)
    return {}, [f'"{base}"', f'  "{base}"\n', f"“{base}”", '"', f'"{base}', f"'{base}'"]


def _capital_words(rng):
    text = prose(rng, rng.randint(1, 4)) + " " + " ".join(rng.choice(("OK", "DON'T", "I'M", "NON-STOP", "U.S.",
                                                                       "A", "HELLO,", "WORLD."))
                                                         for _ in range(rng.randint(0, 6)))
    count = sum(w.strip(".,!?").isupper() for w in text.split())
    return {"capital_frequency": near(count, rng), "capital_relation": relation(rng)}, [text, text.lower(), text.upper()]


def _english_capital(rng):
    text = " ".join(LANGUAGE_TEXTS["en"])
    return {}, [text.upper(), text, " ".join(LANGUAGE_TEXTS["de"]).upper(), text.upper() + " 42", "OK"]


def _english_lowercase(rng):
    text = " ".join(LANGUAGE_TEXTS["en"])
    return {}, [text.lower(), text, " ".join(LANGUAGE_TEXTS["fr"]).lower(), text.lower() + " X", "ok"]


def _no_comma(rng):
    base = prose(rng, 2)
    return {}, [base.replace(",", ""), base + ", yes", base.replace(",", "，"), "ok"]


BUILDERS: dict[str, Builder] = {
    "keywords:existence": _keywords, "keywords:frequency": _frequency, "keywords:forbidden_words": _forbidden,
    "keywords:letter_frequency": _letter, "language:response_language": _language,
    "length_constraints:number_sentences": _sentences, "length_constraints:number_paragraphs": _paragraphs,
    "length_constraints:number_words": _words, "length_constraints:nth_paragraph_first_word": _nth,
    "detectable_content:number_placeholders": _placeholders, "detectable_content:postscript": _postscript,
    "detectable_format:number_bullet_lists": _bullets, "detectable_format:constrained_response": _constrained,
    "detectable_format:number_highlighted_sections": _highlights, "detectable_format:multiple_sections": _sections,
    "detectable_format:json_format": _json, "detectable_format:title": _title,
    "combination:two_responses": _two, "combination:repeat_prompt": _repeat, "startend:end_checker": _end,
    "startend:quotation": _quotation, "change_case:capital_word_frequency": _capital_words,
    "change_case:english_capital": _english_capital, "change_case:english_lowercase": _english_lowercase,
    "punctuation:no_comma": _no_comma,
}
ALL_KWARG_KEYS = sorted({key for b in BUILDERS.values() for key in b(random.Random(0))[0]})


def _dataset_row(rng: random.Random, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Some rows as the HF dataset has them: every kwarg key present, None where unused."""
    return {**dict.fromkeys(ALL_KWARG_KEYS), **kwargs} if rng.random() < 0.3 else kwargs


def cases(rounds: int = 40, seed: int = 0) -> Iterator[Case]:
    """`rounds` rounds of every builder (each several responses), plus one multi-instruction case a round."""
    rng = random.Random(seed)
    for _ in range(rounds):
        built = {}
        for instruction_id, build in BUILDERS.items():
            kwargs, responses = build(rng)
            built[instruction_id] = (kwargs, responses)
            for response in responses:
                for text in (response, wrapped(rng, response)) if rng.random() < 0.4 else (response,):
                    yield Case([instruction_id], [_dataset_row(rng, kwargs)], "Write something.", text)
        chosen = rng.sample(sorted(built), 3)
        for response in built[chosen[0]][1]:
            yield Case(chosen, [_dataset_row(rng, built[c][0]) for c in chosen], "Write something.", response)
