"""afm's own reading of math answers around Math-Verify: forms it misreads, and differences it drops.

Math-Verify (and so the original's scorer) drops a number's base and an answer's units, lower-cases every symbol,
and cannot read several common ways of writing a number. :func:`read_answer` rewrites an answer into the form
Math-Verify reads right and keeps what it would drop; :func:`decide` settles the pairs that Math-Verify cannot
(a different base, a different unit). Both sides go through the same steps, so an answer always equals itself.

Rewrites (each ``\\boxed{}`` body, or the whole answer when it has none):

- ``\\mathrm{i}`` (also ``\\text``, ``\\textrm``, ``\\mathit``, ``\\operatorname``) is the imaginary unit ``i``;
- ``°``, ``\\degree`` and ``\\textdegree`` are ``^{\\circ}``;
- digit groups split by thin spaces (``58\\,500``, ``58\\!500``, ``58~500``, U+2009/U+202F/U+00A0, ``32,\\!348``)
  are one number, and so is an answer that is only space-separated groups (``58 500``); a comma alone is left to
  Math-Verify, and ``1,\\,234`` (a comma and a space) stays a pair;
- e-notation (``3.2e-4``, ``3.2E+04``) is ``3.2\\times 10^{-4}``; ``×`` is ``\\times``;
- a repeating decimal (``0.\\overline{4}``, ``1.2\\overline{36}``, ``0.\\bar{3}``, ``0.\\dot{1}4285\\dot{7}``) is
  the exact fraction it denotes;
- a number with a base subscript (``4210_{5}``, ``4210_5``) keeps its base apart (see :func:`decide`);
- a trailing unit of a known kind (``15\\mbox{ cm}^2``, ``15 cm^2``, ``15 square centimeters``) is kept apart;
- upper-case Latin letters used as symbols are renamed so that Math-Verify, which lower-cases every symbol, keeps
  ``R`` and ``r`` apart (``R`` -> ``r_{uc}``). Not where the answer holds a word (a run of three or more letters:
  ``Yes``, ``ABC``), nor a lone letter (a choice such as ``C`` or ``(C)``), nor text inside ``\\text{}``.

The policy writes the answers read here, so every step is linear in the answer's length and none raises on any
string: boxes are matched in one pass with a stack, runs of spaces and digits in the patterns are possessive
(``\\s*+``, ``\\d++``) so that they cannot backtrack quadratically, a trailing power is read from the end, and
integers too long for Python to read (a repeating decimal of thousands of digits, a huge base) are left as written.
A run of 4,000 unclosed ``\\boxed{`` took 33 s before, and 100,000 digits followed by `` cm`` 100 s; both now take
milliseconds. This module also runs only inside the math worker (:mod:`afm.rewards._math_worker`), under its
deadline, and after the caps of :mod:`afm.rewards.math` (answer length and nesting depth).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from fractions import Fraction

# -- units -------------------------------------------------------------------------------------------------------
# canonical name -> the spellings that mean it (singular and plural; matched case-sensitively after "sq"/"square"
# prefixes and exponents are read apart, since "m" and "M" or "mm" and "Mm" are different units).
_UNIT_NAMES: dict[str, tuple[str, ...]] = {
    "mm": ("mm", "millimeter", "millimeters", "millimetre", "millimetres"),
    "cm": ("cm", "centimeter", "centimeters", "centimetre", "centimetres"),
    "m": ("m", "meter", "meters", "metre", "metres"),
    "km": ("km", "kilometer", "kilometers", "kilometre", "kilometres"),
    "in": ("in", "inch", "inches"),
    "ft": ("ft", "foot", "feet"),
    "yd": ("yd", "yard", "yards"),
    "mi": ("mi", "mile", "miles"),
    "unit": ("unit", "units"),
    "g": ("g", "gram", "grams"),
    "kg": ("kg", "kilogram", "kilograms"),
    "mg": ("mg", "milligram", "milligrams"),
    "lb": ("lb", "lbs", "pound", "pounds"),
    "oz": ("oz", "ounce", "ounces"),
    "L": ("L", "liter", "liters", "litre", "litres"),
    "mL": ("mL", "ml", "milliliter", "milliliters", "millilitre", "millilitres"),
    "gal": ("gal", "gallon", "gallons"),
    "s": ("s", "sec", "second", "seconds"),
    "min": ("min", "minute", "minutes"),
    "h": ("h", "hr", "hrs", "hour", "hours"),
    "day": ("day", "days"),
    "week": ("week", "weeks"),
    "year": ("year", "years"),
    "cent": ("cent", "cents"),
    "dollar": ("dollar", "dollars"),
    "mph": ("mph",),
    "m/s": ("m/s",),
    "km/h": ("km/h", "kph"),
    "deg": ("deg", "degree", "degrees"),
    "rad": ("rad", "radian", "radians"),
    "percent": ("percent",),
}
_UNITS = {spelling: name for name, spellings in _UNIT_NAMES.items() for spelling in spellings}
_POWER_WORDS = {"square": 2, "sq": 2, "sq.": 2, "cubic": 3, "cu": 3, "cu.": 3}
_SUPERSCRIPT = {"\u00b2": 2, "\u00b3": 3}
_TEXT_CMD = r"\\(?:text|mbox|textrm|mathrm|textnormal|mathit|operatorname)"
_UNIT_TEXT = re.compile(rf"{_TEXT_CMD}\s*+\{{([^{{}}]*+)\}}")  # the body is stripped by split_unit
_SPACE = r"(?:\s|\\[,;:!\ ]|~)"
_POWER = r"(?P<power>\s*+(?:\^\s*+\{?\s*+[23]\s*+\}?|[\u00b2\u00b3]))?\s*+(?:\.\s*+)?"
_SQUARE = r"(?:(?:square|sq\.?|cubic|cu\.?)\s++)?"
# A unit in \text{} (hidden as a \x00n\x00 placeholder) may follow any value that ends in a digit or a brace; a
# bare word only a plain number after a space ("15 cm^2"), since "15m" or "2 h" in a formula may be a product.
_TEXT_UNIT = re.compile(rf"(?P<value>.*?[\d}}]){_SPACE}*+(?P<unit>{_SQUARE}\x00\d++\x00){_POWER}", re.DOTALL)
_NUMBER = r"[-+]?+(?:\d++(?:\.\d*+)?|\.\d++|\\[dt]?frac\{\d++\}\{\d++\})"
_WORD_UNIT = re.compile(rf"(?P<value>{_NUMBER}){_SPACE}++(?P<unit>{_SQUARE}[A-Za-z]++(?:/[A-Za-z]++)?){_POWER}")


@dataclass(frozen=True)
class Answer:
    """One answer as afm reads it: ``text`` for Math-Verify, plus what Math-Verify would drop."""

    text: str
    unit: str | None = None  # canonical unit with its power ("cm^2"), when the answer ends in a known unit
    base: int | None = None  # the base of a number written with a base subscript
    digits: str | None = None  # that number's digits (upper case, no leading zeros)


def _unit(words: str, power: str | None) -> str | None:
    words = " ".join(words.split())
    exponent = 1
    first, _, rest = words.partition(" ")
    if first.lower() in _POWER_WORDS and rest:
        exponent, words = _POWER_WORDS[first.lower()], rest
    name = _UNITS.get(words) or _UNITS.get(words.lower() if len(words) > 3 else "")
    if name is None:
        return None
    if power:
        digits = re.sub(r"\D", "", power) or str(_SUPERSCRIPT.get(power.strip(), ""))
        exponent *= int(digits) if digits else 1
    return name if exponent == 1 else f"{name}^{exponent}"


def split_unit(body: str) -> tuple[str, str | None]:
    """``(value, canonical unit)`` when ``body`` is a value followed by a known unit, else ``(body, None)``."""
    if "\x00" in body:  # NUL marks afm's own placeholders below; no unit is written with one
        return body, None
    texts: list[str] = []

    def hide(m: re.Match[str]) -> str:
        texts.append(m.group(1).strip())
        return f"\x00{len(texts) - 1}\x00"

    hidden = _UNIT_TEXT.sub(hide, body)
    m = _TEXT_UNIT.fullmatch(hidden.strip()) or _WORD_UNIT.fullmatch(hidden.strip())
    if not m:
        return body, None
    words = m["unit"]
    holder = re.search(r"\x00(\d+)\x00", words)
    if holder:
        words = words.replace(holder.group(0), texts[int(holder.group(1))])
    power = m["power"]
    # "\text{cm}^2" or "\text{cm^2}": the power may sit inside the text too
    inner_words, inner_power = _trailing_power(words)
    if inner_power and not power:
        words, power = inner_words, inner_power
    unit = _unit(words, power)
    value = m["value"]
    if unit is None or "\x00" in value:
        return body, None
    return value.strip(), unit


_INNER_POWER = re.compile(r"\^\s*+\{?\s*+[23]\s*+\}?")


def _trailing_power(words: str) -> tuple[str, str | None]:
    """``(words, power)`` when ``words`` ends in a power (``cm^2``, ``cm²``), else ``(words, None)``.

    Read from the end, not with a lazy prefix pattern, which is quadratic in a long run of spaces.
    """
    words = words.strip()
    if words.endswith(("\u00b2", "\u00b3")):
        return words[:-1].rstrip(), words[-1]
    caret = words.rfind("^")  # a power holds one caret, so it starts at the last one
    if caret >= 0 and _INNER_POWER.fullmatch(words, caret):
        return words[:caret].rstrip(), words[caret:]
    return words, None


# -- number bases ------------------------------------------------------------------------------------------------
# Possessive runs: "[0-9A-Za-z]*[0-9][0-9A-Za-z]*_" backtracked quadratically over a long digit string; the digit
# the digits must hold is checked after the match instead.
_BASED = re.compile(r"(?P<digits>[0-9A-Za-z]++)_\s*+(?:\{\s*+(?:\\text\s*+\{\s*+)?(?P<b1>\d++)\s*+(?:\}\s*+)?\}"
                    r"|(?P<b2>\d))")


def split_base(body: str) -> tuple[str, int | None, str | None]:
    """``(digits, base, canonical digits)`` when ``body`` is one number with a base subscript (``4210_{5}``)."""
    if "_" not in body:
        return body, None, None
    m = _BASED.fullmatch(body.strip())
    if not m or not any(c in "0123456789" for c in m["digits"]) or len(m["b1"] or m["b2"]) > 4:
        return body, None, None
    base = int(m["b1"] or m["b2"])
    digits = m["digits"].upper().lstrip("0") or "0"
    if not 2 <= base <= 36 or any(int(d, 36) >= base for d in digits):
        return body, None, None
    return m["digits"], base, digits


# -- number forms ------------------------------------------------------------------------------------------------
# Runs of spaces are possessive (\s*+) wherever what follows cannot be a space: backtracking into two adjacent
# optional runs is quadratic in a long run.
_ROMAN_I = re.compile(rf"{_TEXT_CMD}\s*+\{{\s*+i\s*+\}}|\\imath\b")
_DEGREE = re.compile(r"\^\s*+\{?\s*+(?:°|\\degree|\\textdegree)\s*+\}?|°|\\degree(?![A-Za-z])|\\textdegree(?![A-Za-z])")
_THIN = r"(?:,\\!|\\[,!;: ]|~|[\u2009\u202f\u00a0])"
_THOUSANDS = re.compile(rf"(?<![\d.])\d{{1,3}}(?:{_THIN}\d{{3}})+(?!\d)")
_SPACED = re.compile(r"\d{1,3}(?: \d{3})+(?:\.\d+)?")
_E_NOTATION = re.compile(r"(?<![\w.\\])(\d++(?:\.\d*+)?|\.\d++)\s*+[eE]\s*+([+\-\u2212]?)\s*+(\d++)(?![\w.])")
_REPEAT = re.compile(r"(?<![\d.])(?P<int>\d*+)\.(?P<fixed>\d*+)\\(?:overline|bar)\s*+"
                     r"(?:\{\s*+(?P<rep>\d++)\s*+\}|(?P<one>\d))")
_DOTS = re.compile(r"(?<![\d.])(?P<int>\d*+)\.(?P<fixed>\d*+)\\dot\s*+\{\s*+(?P<first>\d)\s*+\}"
                   r"(?:(?P<mid>\d*+)\\dot\s*+\{\s*+(?P<last>\d)\s*+\})?")
# Digits of a repeating decimal afm rewrites as a fraction; longer ones are left to Math-Verify (Python refuses to
# read integers of more than 4,300 digits, and no contest answer repeats that many).
_MAX_REPEAT_DIGITS = 200


def _fraction_latex(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


def repeating_value(integer: str, fixed: str, repeat: str) -> Fraction:
    """The exact value of ``integer.fixed(repeat)(repeat)...`` (``0.1(6)`` is 1/6)."""
    whole = Fraction(int(integer or "0"))
    if not repeat:
        return whole + (Fraction(int(fixed), 10 ** len(fixed)) if fixed else 0)
    number = int(fixed + repeat) - int(fixed or "0")
    return whole + Fraction(number, 10 ** len(fixed) * (10 ** len(repeat) - 1))


def _repeating(text: str) -> str:
    def fraction(m: re.Match[str], integer: str, fixed: str, repeat: str) -> str:
        if len(integer) + len(fixed) + len(repeat) > _MAX_REPEAT_DIGITS:
            return m.group(0)
        return "{" + _fraction_latex(repeating_value(integer, fixed, repeat)) + "}"

    def bar(m: re.Match[str]) -> str:
        return fraction(m, m["int"], m["fixed"], m["rep"] or m["one"])

    def dots(m: re.Match[str]) -> str:
        return fraction(m, m["int"], m["fixed"], m["first"] + ((m["mid"] or "") + m["last"] if m["last"] else ""))

    return _DOTS.sub(dots, _REPEAT.sub(bar, text))


def number_forms(text: str) -> str:
    """Rewrite the number forms Math-Verify misreads (roman i, °, thin-space thousands, e-notation, repeating
    decimals) into ones it reads."""
    text = _ROMAN_I.sub("i", text)
    text = _DEGREE.sub(r"^{\\circ}", text)
    text = _THOUSANDS.sub(lambda m: re.sub(_THIN, "", m.group(0)), text)
    text = text.replace("\u00d7", "\\times ").replace("\u2212", "-")
    text = _E_NOTATION.sub(lambda m: f"{m[1]}\\times 10^{{{'-' if m[2] == '-' else ''}{m[3]}}}", text)
    return _repeating(text)


# -- symbol case -------------------------------------------------------------------------------------------------
_COMMAND = re.compile(r"\\[A-Za-z]+")
_PROTECTED = re.compile(r"\\(?:text\w*+|mbox|mathrm|mathbb|mathcal|mathfrak|mathsf|mathtt|operatorname|begin|end)"
                        r"\s*+\{[^{}]*+\}|\\[A-Za-z]++")
_UPPER = re.compile(r"(?P<letter>[A-Z])(?:_\s*+(?:\{(?P<sub>[A-Za-z0-9]++)\}|(?P<one>[A-Za-z0-9])))?")


def _letters(text: str) -> list[str]:
    return re.findall(r"[A-Za-z]+", _PROTECTED.sub(" ", text))


def keep_case(text: str) -> str:
    """Rename upper-case Latin symbols (``R`` -> ``r_{uc}``, ``R_1`` -> ``r_{uc1}``) so Math-Verify keeps their case.

    Left alone: an answer holding a word (three or more letters in a row outside commands) or a lone letter, and
    letters inside ``\\text{}``, ``\\mathbb{}``, ``\\mathrm{}`` and other commands.
    """
    runs = _letters(text)
    if not runs or any(len(run) >= 3 for run in runs) or not any(c.isupper() for run in runs for c in run):
        return text
    if len(runs) == 1 and len(runs[0]) == 1 and re.fullmatch(r"\W*+[A-Za-z]\W*+", _PROTECTED.sub("", text)):
        return text  # "C", "(C)", "$E$": a choice, not a symbol

    out, last = [], 0
    for m in _PROTECTED.finditer(text):
        out.append(_rename(text[last:m.start()]))
        out.append(m.group(0))
        last = m.end()
    out.append(_rename(text[last:]))
    return "".join(out)


def _rename(segment: str) -> str:
    def one(m: re.Match[str]) -> str:
        sub = m["sub"] or m["one"] or ""
        return f"{m['letter'].lower()}_{{uc{sub}}}"

    return _UPPER.sub(one, segment)


# -- whole answers -----------------------------------------------------------------------------------------------
def _boxed_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every ``\\boxed{...}`` body (balanced braces), in the order of the boxes.

    One pass with a stack of open braces: a box's body ends at the brace that closes its own, and a box that is
    never closed has no span. (Scanning forward from each box was quadratic in a run of unclosed boxes.)
    """
    openers = {m.end() - 1 for m in _BOX.finditer(text)}
    if not openers:
        return []
    stack: list[int] = []
    spans = []
    for m in _BRACE.finditer(text):
        if m.group(0) == "{":
            stack.append(m.start())
        elif stack:
            start = stack.pop()
            if start in openers:
                spans.append((start + 1, m.start()))
    spans.sort()
    return spans


_BOX = re.compile(r"\\boxed\s*+\{")
_BRACE = re.compile(r"[{}]")
_DOLLARS = re.compile(r"(\s*+\$\$?\s*+)([^$]*+)(\$\$?\s*+)")


def _strip_dollars(body: str) -> tuple[str, str, str]:
    m = _DOLLARS.fullmatch(body)
    if m and m.group(1).count("$") == m.group(3).count("$"):
        inner = m.group(2).rstrip()  # spaces before the closing dollar belong to it, as they always did
        return m.group(1), inner, m.group(2)[len(inner):] + m.group(3)
    return "", body, ""


def _read_body(body: str) -> Answer:
    left, inner, right = _strip_dollars(body)
    if _SPACED.fullmatch(inner.strip()):  # "58 500" alone is one number; inside a formula a space may mean a product
        inner = inner.replace(" ", "")
    inner = number_forms(inner)
    value, unit = split_unit(inner)
    digits_text, base, digits = split_base(value)
    if base is not None:
        return Answer(left + digits_text + right, unit, base, digits)
    return Answer(left + keep_case(value) + right, unit)


def read_answer(text: str) -> Answer:
    """afm's reading of one answer (gold or prediction); see the module docstring."""
    spans = _boxed_spans(text)
    if not spans:
        return _read_body(text)
    # The last box is the answer (as Math-Verify takes it); the others are rewritten for their number forms only.
    out, last, answer = [], 0, Answer(text)
    for i, (start, end) in enumerate(spans):
        if start < last:
            continue  # a box nested in the previous one
        out.append(text[last:start])
        if i == len(spans) - 1:
            answer = _read_body(text[start:end])
            out.append(answer.text)
        else:
            out.append(keep_case(number_forms(text[start:end])))
        last = end
    out.append(text[last:])
    return replace(answer, text="".join(out))


def decide(gold: Answer, pred: Answer) -> tuple[bool | None, str]:
    """``(verdict, rule)`` where afm settles a pair without Math-Verify, else ``(None, "")``.

    - Both numbers carry a base: equal exactly when the bases and the digits are equal (``4210_{5}`` vs
      ``4210_{6}`` is wrong). When only one does, the base is the one the question asked for, and the digits are
      compared by Math-Verify.
    - Both answers end in a known unit and the units differ (``cm^2`` vs ``m^2``): wrong; afm converts no units.
      When only one side has a unit, the values are compared (``15`` equals ``15 cm^2``).
    """
    if gold.base is not None and pred.base is not None:
        same = (gold.base, gold.digits) == (pred.base, pred.digits)
        return same, f"base {pred.base} number vs base {gold.base}" if not same else "same base and digits"
    if gold.unit is not None and pred.unit is not None and gold.unit != pred.unit:
        return False, f"unit {pred.unit} vs {gold.unit}"
    return None, ""
