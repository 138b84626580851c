"""Honest completions generated from templates: several hundred, in eight languages and five styles.

Each completion picks distinct sentences of one language (a sentence is never used twice in a
completion, as an honest writer does not loop), numbers drawn per sentence, and wraps them in one
style: prose, numbered steps, bullets, a markdown table, LaTeX or a code fence.
"""

from __future__ import annotations

import random

# Reasoning sentences per language; {a}, {b}, {c} are numbers. Each says something different.
SENTENCES = {
    "en": [
        "The shop sells {a} pencils on Monday and {b} more on Tuesday.",
        "Adding the two days gives the total for the first half of the week.",
        "A quick check with rounding puts the result near {c}, which looks plausible.",
        "Multiplying the price per box by the number of boxes gives the cost.",
        "Dividing evenly among the friends leaves no remainder here.",
        "Each bus carries {a} children, and the school booked {b} buses.",
        "The difference between the heights is exactly {c} centimetres.",
        "Subtracting what was spent from the savings shows what remains.",
        "Working backwards from the answer reproduces every number in the question.",
        "The rectangle is {a} metres long and {b} metres wide, so its area follows directly.",
    ],
    "fr": [
        "La boulangerie vend {a} croissants le matin et {b} l'après-midi.",
        "En additionnant les deux ventes, on obtient le total de la journée.",
        "Une vérification rapide par arrondi donne environ {c}, ce qui est cohérent.",
        "Le prix d'un cahier multiplié par le nombre de cahiers donne la dépense.",
        "Chaque élève reçoit la même part, sans reste.",
        "Le train parcourt {a} kilomètres en {b} heures.",
        "La différence entre les deux prix est de {c} euros.",
        "On retranche la dépense de l'épargne pour trouver ce qui reste.",
        "En refaisant le calcul à l'envers, on retrouve les données de l'énoncé.",
    ],
    "de": [
        "Der Laden verkauft am Montag {a} Stifte und am Dienstag {b} weitere.",
        "Wenn man beide Tage addiert, erhält man die Summe der Woche.",
        "Eine grobe Überschlagsrechnung ergibt ungefähr {c}, das passt.",
        "Der Preis pro Kiste mal die Anzahl der Kisten ergibt die Kosten.",
        "Jedes Kind bekommt gleich viel, es bleibt nichts übrig.",
        "Ein Zug fährt {a} Kilometer in {b} Stunden.",
        "Der Unterschied zwischen den beiden Längen beträgt {c} Zentimeter.",
        "Zieht man die Ausgaben vom Ersparten ab, bleibt der Rest.",
        "Die Probe rückwärts liefert wieder alle Zahlen aus der Aufgabe.",
    ],
    "es": [
        "La tienda vende {a} lápices el lunes y {b} más el martes.",
        "Sumando los dos días se obtiene el total de la semana.",
        "Una comprobación aproximada da cerca de {c}, lo cual es razonable.",
        "El precio por caja multiplicado por el número de cajas da el coste.",
        "Cada amigo recibe la misma parte y no sobra nada.",
        "El autobús recorre {a} kilómetros en {b} horas.",
        "La diferencia entre las dos alturas es de {c} centímetros.",
        "Restando el gasto de los ahorros queda lo que falta.",
        "Al rehacer la cuenta al revés se recuperan los datos del enunciado.",
    ],
    "zh": [
        "商店星期一卖出{a}支铅笔，星期二又卖出{b}支。",
        "把两天的数量加起来，就得到前半周的总数。",
        "用估算检验一下，结果大约是{c}，比较合理。",
        "每箱的价格乘以箱数，就是总花费。",
        "平均分给朋友们，正好没有剩余。",
        "每辆车坐{a}个孩子，学校一共订了{b}辆车。",
        "两个高度的差正好是{c}厘米。",
        "从存款中减去花掉的钱，就是剩下的钱。",
        "倒着验算一遍，题目里的每个数都能还原。",
    ],
    "ja": [
        "店は月曜日に鉛筆を{a}本、火曜日にさらに{b}本売りました。",
        "二日分を足すと、週の前半の合計になります。",
        "概算で確かめると約{c}になり、妥当です。",
        "一箱の値段に箱の数をかけると、費用が求まります。",
        "友だちに同じ数ずつ分けると、余りは出ません。",
        "バス一台に子どもが{a}人乗り、学校は{b}台を予約しました。",
        "二つの高さの差はちょうど{c}センチメートルです。",
        "貯金から使った分を引くと、残りがわかります。",
        "答えから逆に計算すると、問題の数がすべて戻ります。",
    ],
    "ru": [
        "Магазин продал в понедельник {a} карандашей, а во вторник ещё {b}.",
        "Сложив оба дня, получаем итог за первую половину недели.",
        "Грубая прикидка даёт около {c}, это правдоподобно.",
        "Цена одной коробки, умноженная на число коробок, даёт стоимость.",
        "Каждый друг получает поровну, остатка нет.",
        "Поезд проходит {a} километров за {b} часа.",
        "Разница между высотами составляет ровно {c} сантиметров.",
        "Вычитая расходы из сбережений, находим остаток.",
        "Обратная проверка восстанавливает все числа из условия.",
    ],
    "ko": [
        "가게는 월요일에 연필 {a}자루를 팔았고 화요일에 {b}자루를 더 팔았습니다.",
        "두 날을 더하면 주 전반의 합계가 나옵니다.",
        "어림셈으로 확인하면 약 {c}이므로 타당합니다.",
        "상자 하나의 가격에 상자 수를 곱하면 비용이 됩니다.",
        "친구들에게 똑같이 나누면 나머지가 없습니다.",
        "버스 한 대에 아이들이 {a}명 타고 학교는 {b}대를 예약했습니다.",
        "두 높이의 차이는 정확히 {c}센티미터입니다.",
        "저축에서 쓴 돈을 빼면 남은 돈을 알 수 있습니다.",
        "답에서 거꾸로 계산하면 문제의 수가 모두 나옵니다.",
    ],
}

STYLES = ("prose", "steps", "bullets", "table", "latex", "code")


def _sentences(rng: random.Random, language: str, count: int) -> list[str]:
    return [s.format(a=rng.randint(2, 99), b=rng.randint(100, 999), c=rng.randint(1000, 9999))
            for s in rng.sample(SENTENCES[language], count)]


def _reasoning(rng: random.Random, language: str, style: str) -> str:
    lines = _sentences(rng, language, rng.randint(4, 7))
    if style == "steps":
        return "\n".join(f"{i}. {line}" for i, line in enumerate(lines, 1))
    if style == "bullets":
        return "\n".join(f"- {line}" for line in lines)
    if style == "table":
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        table = f"| $x$ | $y$ | $x + y$ |\n|---|---|---|\n| {a} | {b} | {a + b} |"
        return " ".join(lines[:2]) + "\n\n" + table + "\n\n" + " ".join(lines[2:])
    if style == "latex":
        a, b = rng.randint(2, 30), rng.randint(2, 30)
        formula = f"$$\\frac{{{a * b}}}{{{b}}} = {a}, \\quad {a}^2 = {a * a}$$"
        return " ".join(lines[:3]) + "\n" + formula + "\n" + " ".join(lines[3:])
    if style == "code":
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        code = f"```python\ntotal = {a} * {b}\nprint(total)  # {a * b}\n```"
        return " ".join(lines[:2]) + "\n" + code + "\n" + " ".join(lines[2:])
    return " ".join(lines)


def honest_corpus(count: int = 480, seed: int = 0) -> list[dict]:
    """`count` honest completions, as {"id", "language", "style", "completion"}, every language and
    style combination about equally often."""
    rng = random.Random(seed)
    languages = sorted(SENTENCES)
    rows = []
    for i in range(count):
        language, style = languages[i % len(languages)], STYLES[(i // len(languages)) % len(STYLES)]
        answer = str(rng.randint(1, 99999))
        completion = f"<think>\n{_reasoning(rng, language, style)}\n</think>\n<answer>\n{answer}\n</answer>"
        rows.append({"id": f"{language}_{style}_{i}", "language": language, "style": style, "completion": completion})
    return rows
