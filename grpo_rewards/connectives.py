"""The words that join alternatives ("5 or 6") in every language CLDR covers.

`OR_WORDS` is generated from the Unicode CLDR list patterns of type "or" (`{0} or {1}`), read with
babel: `python -m grpo_rewards.connectives` prints the tuple below afresh (babel is a `dev`
dependency; loading CLDR's 300 base locales takes seconds, too slow for a trainer's start-up,
hence the generated tuple). tests/test_math_connectives.py checks that it matches CLDR.
"""

from __future__ import annotations

# CLDR "or" words that are also English words or unit symbols: read as "or" they would turn a
# remark into a hedge ("12, an even number"; "5 au").
NOT_CONNECTIVES = frozenset({"an", "ar", "au", "ko", "ma", "no", "of", "pe", "u"})
# Words that make what follows an alternative, besides the "or" words.
HEDGE_WORDS = frozenset({"maybe", "perhaps", "possibly", "probably", "alternatively", "otherwise", "else",
                         "either", "likely", "might", "could", "conceivably"})


def cldr_or_words() -> tuple[str, ...]:
    """The "or" connectives of CLDR's base locales (needs babel)."""
    # babel is a dev dependency, needed only to regenerate OR_WORDS
    from babel import Locale
    from babel.localedata import locale_identifiers

    found = set()
    for ident in locale_identifiers():
        if "_" in ident:
            continue
        try:
            patterns = Locale.parse(ident).list_patterns.get("or") or {}
        except Exception:  # noqa: BLE001 - a locale babel cannot load has no pattern to read
            continue
        for key in ("2", "end"):
            pattern = patterns.get(key)
            if pattern:
                word = pattern.replace("{0}", " ").replace("{1}", " ").strip(" ,،、").strip()
                if word and word.lower() not in NOT_CONNECTIVES:
                    found.add(word.lower())
    return tuple(sorted(found))


OR_WORDS: tuple[str, ...] = (
    'aadtẽ', 'aaḍẽ', 'abo', 'alebo', 'ali', 'ama', 'anaa', 'atau', 'atawa', 'aŭ',
    'edo', 'ella', 'eller', 'eða', 'hoặc', 'ili', 'ketũmỹr', 'koo', 'lub', 'ma ọ bụ',
    'nebo', 'neu', 'neɣ', 'niɣ', 'nó', 'o', 'oder', 'or', 'ose', 'ou',
    'pē', 'roxnaeuz', 'rānei', 'sau', 'tabi', 'tai', 'tàbí', 'utaq', 'utowo', 'vagy',
    'vai', 'veya', 'või', 'yaxud', 'yoki', 'ò', 'òf', 'ýa-da', 'ή', 'або',
    'е', 'же', 'зэргийн аль нэг', 'или', 'ма', 'не', 'не болмаса', 'ці', 'эсвэл', 'яки',
    'ё', 'կամ', 'או', 'أو', 'يا', 'یا', 'ܐܘ', 'किंवा', 'या', 'वा',
    'বা', 'ਜਾਂ', 'અથવા', 'କିମ୍ବା', 'அல்லது', 'లేదా', 'ಅಥವಾ', 'അല്ലെങ്കിൽ', 'හෝ', 'หรือ',
    'ຫຼື', 'သို့မဟုတ်', 'ან', 'ወይ', 'ወይም', 'ᐊᐍᑳ', 'ឬ', 'ᱟᱨᱵᱟᱝᱠᱷᱟᱱ', 'ọ', 'または',
    '或', 'ꅀ', 'ꭰꮄᏹꭹ', '또는',
)

if __name__ == "__main__":
    print("OR_WORDS: tuple[str, ...] = (")
    words = cldr_or_words()
    for start in range(0, len(words), 10):
        print("    " + " ".join(repr(w) + "," for w in words[start : start + 10]))
    print(")")
