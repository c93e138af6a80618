"""The embedded English-German default of `keras_selfattn.data.text`: the Ding
dictionary of Debian's `trans-de-en` package, fetched with `apt-get download`
and `dpkg-deb -x`, and its parser.

The Ding format, one entry a line: `german :: english`; ` | ` separates the
entry's sub-entries, aligned on both sides (a headword, its inflections, its
example phrases and sentences); `;` separates synonyms inside a sub-entry.
Annotations: `{f}` / `{vt}` (gender, part of speech), `[Br.]` / `[ugs.]`
(region, register, field), `(...)` (explanations), `<...>` (search keywords,
comparative forms), `/PM/` (abbreviations); `a/b` spells word alternatives
and ` / ` whole alternatives. `sth.` / `sb.` / `etw.` / `jdn.` mark slots of
a pattern, `…` an omission.
"""

import hashlib
import itertools
import logging
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from keras_selfattn.data.cache import cache_folder

logger = logging.getLogger("keras_selfattn.data.text")

DING_PACKAGE = "trans-de-en"
DING_MEMBER = Path("usr/share/trans/de-en")
# Written beside the extracted package: the dictionary's sha256 as extracted.
DING_CHECKSUM = "de-en.sha256"
MIN_SENTENCE_WORDS = 2

_ANNOTATION = re.compile(r"\{[^{}]*\}|\[[^\[\]]*\]|<[^<>]*>|\([^()]*\)")
_ABBREVIATION = re.compile(r"(?:^|\s)/[^\s/]+/(?=\s|$|[.,;:!?])")
_WORD = r"[^\W\d_][\w’'-]*"
_WORD_ALTERNATIVES = re.compile(rf"\b({_WORD})(?:\s?/\s?{_WORD})+")
_WHOLE_ALTERNATIVES = re.compile(r"\s/\s")
_MAY_END_SENTENCE = re.compile(r"[.!?]")
_SPACE_BEFORE_PUNCTUATION = re.compile(r"\s+([.,;:!?])")
_OPENING = "„\"“‚'‘»«¡¿"
_SENTENCE_END = re.compile(r"[.!?][”“\"'’‘«»]?$")
_NOT_NATURAL = re.compile(r"…|\.\.\.|~|\b(?:sth|sb|etw|jdn|jdm|jds|jd)\.")


class DingDictionaryError(ValueError):
    """The cached Ding dictionary cannot be used (not UTF-8, no entry, or not
    the file that was extracted); the message names the file and how to
    fetch it again."""


def default_data_dir():
    """`$KERAS_SELFATTN_DATA/text` when that variable is set, else
    `~/.cache/keras_selfattn/text`."""
    return cache_folder("text")


def _sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _damaged(dictionary, reason):
    folder = dictionary.parents[len(DING_MEMBER.parts) - 1]
    return DingDictionaryError(
        f"The cached Ding dictionary {dictionary} is damaged ({reason}). Delete its folder "
        f"(`rm -r {folder}`) and run again to fetch it anew with `apt-get download {DING_PACKAGE}`, "
        "or pass your own sentence pairs: `--pairs_tsv FILE`."
    )


def _verify(dictionary):
    """Raises `DingDictionaryError` when the dictionary's sha256 differs from
    the one recorded at extraction (caches from before the record are not checked)."""
    record = dictionary.parents[len(DING_MEMBER.parts) - 1] / DING_CHECKSUM
    if not record.is_file():
        return
    expected = record.read_text(encoding="ascii").strip()
    actual = _sha256_of(dictionary)
    if actual != expected:
        raise _damaged(dictionary, f"sha256 {actual}, extracted as {expected}")


def _strip_annotations(text):
    for _ in range(2):  # one level of nesting, e.g. "(a (b) c)"
        text = _ANNOTATION.sub(" ", text)
    return _ABBREVIATION.sub(" ", text)


def _tidy(text):
    text = " ".join(text.split())
    return _SPACE_BEFORE_PUNCTUATION.sub(r"\1", text)


def _clean_synonym(text):
    text = _WORD_ALTERNATIVES.sub(r"\1", text)
    return _tidy(_WHOLE_ALTERNATIVES.split(text, maxsplit=1)[0])


def clean_ding_text(text):
    """One Ding synonym without its annotations: `{...}`, `[...]`, `<...>`,
    `(...)` and `/ABBR/` removed, word alternatives (`a/b`, `a / b`)
    reduced to the first word, and of the whole alternatives that a
    remaining ` / ` separates (after punctuation: `Fine. / Great.`, often a
    continuation: `Er kommt. / kommt bald.`) the first kept; spaces
    normalised.

    >>> clean_ding_text("Das ist blanker Unsinn. [ugs.]")
    'Das ist blanker Unsinn.'
    >>> clean_ding_text("That is sheer/pure nonsense (really) /TSN/ .")
    'That is sheer nonsense.'
    >>> clean_ding_text("Mein Schmerz lässt sich nicht in Worte fassen. / kennt keine Worte.")
    'Mein Schmerz lässt sich nicht in Worte fassen.'
    """
    return _clean_synonym(_strip_annotations(text))


def is_natural_sentence(text):
    """The rule for Ding's example sentences, on cleaned text: starts with an
    upper-case letter or a digit (after opening quotes), ends with `.`, `!`
    or `?` (before closing quotes), has at least `MIN_SENTENCE_WORDS` words,
    and holds no pattern slot (`sth.`, `sb.`, `etw.`, `jdn.`, `jdm.`, `jds.`,
    `jd.`), omission (`…`, `...`) or `~`.

    >>> is_natural_sentence("Es war purer Zufall.")
    True
    >>> is_natural_sentence("to have a passion for sth.")
    False
    """
    start = text.lstrip(_OPENING)[:1]
    return (
        (start.isupper() or start.isdigit())
        and bool(_SENTENCE_END.search(text))
        and len(text.split()) >= MIN_SENTENCE_WORDS
        and not _NOT_NATURAL.search(text)
    )


def _alternatives(side, sentences_only):
    """The cleaned synonyms of one sub-entry side (`clean_ding_text`; the
    annotations go before the `;` split, as they may hold `;`), only the
    natural sentences when `sentences_only`."""
    if sentences_only and not _MAY_END_SENTENCE.search(side):
        return []
    found = []
    for synonym in _strip_annotations(side).split(";"):
        text = _clean_synonym(synonym)
        if text and (not sentences_only or is_natural_sentence(text)):
            found.append(text)
    return found


def parse_ding_lines(lines, *, sentences_only=True):
    """German-English pairs from lines in the Ding format.

    Each entry's sub-entries (` | `) are aligned on both sides; inside a
    sub-entry every German synonym is paired with every English synonym
    (synonyms translate each other). With `sentences_only`, only synonyms
    that are natural sentences (`is_natural_sentence`, after
    `clean_ding_text`) take part, so a sub-entry gives pairs only where both
    sides hold a sentence. Comment lines (`#`), lines without ` :: ` and
    entries whose sides have different sub-entry counts are skipped. Exact
    duplicate pairs are kept once, in first-seen order.

    Args:
        lines: iterable of `str` lines.
        sentences_only: `True` for the example sentences, `False` for every
            sub-entry (words and phrases too).

    Returns:
        `(pairs, counts)`: a list of `(german, english)` tuples and a dict
        with `"entries"`, `"skipped_lines"` and `"pairs"`.

    >>> lines = ["Zufall {m} | Es war purer Zufall. :: chance | It was sheer/pure coincidence."]
    >>> parse_ding_lines(lines)[0]
    [('Es war purer Zufall.', 'It was sheer coincidence.')]
    """
    pairs = {}
    counts = {"entries": 0, "skipped_lines": 0}
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        sides = line.split(" :: ")
        german, english = (sides[0].split("|"), sides[1].split("|")) if len(sides) == 2 else ((), ())
        if not german or len(german) != len(english):
            counts["skipped_lines"] += 1
            continue
        counts["entries"] += 1
        for german_side, english_side in zip(german, english):
            targets = _alternatives(english_side, sentences_only)
            sources = _alternatives(german_side, sentences_only) if targets else []
            pairs.update(dict.fromkeys(itertools.product(sources, targets)))
    counts["pairs"] = len(pairs)
    return list(pairs), counts


def _missing_tool_error(tool):
    return RuntimeError(
        f"The default English-German data needs `{tool}` to fetch the Debian package `{DING_PACKAGE}` "
        f"(`apt-get download {DING_PACKAGE} && dpkg-deb -x trans-de-en_*.deb DIR`, or "
        f"`apt-get install {DING_PACKAGE}`), and `{tool}` is not on this machine's PATH. "
        "Pass your own sentence pairs instead: `--pairs_tsv FILE`, one `source<TAB>target` pair a line."
    )


def _run(command, cwd):
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(
            f"`{' '.join(command)}` failed (exit {result.returncode}) in {cwd}: "
            f"{result.stderr.strip()[-2000:]}\nIf apt cannot find `{DING_PACKAGE}`, run `apt-get update` "
            "first, or pass your own sentence pairs: `--pairs_tsv FILE`, one `source<TAB>target` pair a line."
        )


def fetch_ding_dictionary(data_dir=None):
    """The Ding dictionary file of Debian's `trans-de-en` (GPL-2+), fetched once.

    The first call runs `apt-get download trans-de-en` and `dpkg-deb -x`
    into `data_dir`; later calls find `data_dir/trans-de-en/usr/share/trans/de-en`
    there, checked against the sha256 recorded at extraction
    (`DING_CHECKSUM` in the package folder). No root rights are needed
    (apt's package lists must know the package: `apt-get update`).

    Args:
        data_dir: cache folder; default `default_data_dir()`.

    Returns:
        The `Path` of the dictionary file.

    Raises:
        RuntimeError: `apt-get` or `dpkg-deb` is missing or fails; the
            message names the package and the `--pairs_tsv` alternative.
        DingDictionaryError: the cached file is not the one extracted.
    """
    data_dir = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    folder = data_dir / DING_PACKAGE
    dictionary = folder / DING_MEMBER
    if dictionary.is_file():
        _verify(dictionary)
        return dictionary
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise _missing_tool_error(tool)
    data_dir.mkdir(parents=True, exist_ok=True)
    logger.warning("Fetching the default sentence pairs: apt-get download %s into %s", DING_PACKAGE, data_dir)
    with tempfile.TemporaryDirectory(dir=data_dir) as scratch:
        _run(["apt-get", "download", "-q", DING_PACKAGE], cwd=scratch)
        packages = sorted(Path(scratch).glob(f"{DING_PACKAGE}_*.deb"))
        if not packages:
            raise RuntimeError(f"`apt-get download {DING_PACKAGE}` wrote no .deb file in {scratch}")
        extracted = Path(scratch) / "extracted"
        _run(["dpkg-deb", "-x", str(packages[-1]), str(extracted)], cwd=scratch)
        if not (extracted / DING_MEMBER).is_file():
            raise RuntimeError(f"{packages[-1].name} holds no {DING_MEMBER}")
        (extracted / DING_CHECKSUM).write_text(_sha256_of(extracted / DING_MEMBER) + "\n", encoding="ascii")
        if folder.exists():
            shutil.rmtree(folder)
        try:
            extracted.rename(folder)
        except OSError:
            if not dictionary.is_file():  # else another process fetched it meanwhile
                raise
    return dictionary


def ding_pairs(data_dir=None, *, sentences_only=True):
    """The embedded default: German-English pairs from Debian's `trans-de-en`.

    Fetches the dictionary once (`fetch_ding_dictionary`) and parses it with
    `parse_ding_lines`. From `trans-de-en` 1.9-6 (Debian 12): 23,620
    example sentence pairs, 21,575 distinct German sentences, 7.3 words a
    side on average; 889,657 pairs with `sentences_only=False`.

    Args:
        data_dir: cache folder; default `default_data_dir()`
            (`~/.cache/keras_selfattn/text`).
        sentences_only: `True` for the natural example sentences; `False`
            for every sub-entry, words and phrases included.

    Returns:
        A list of `(german, english)` string tuples.

    Raises:
        RuntimeError: fetching failed (see `fetch_ding_dictionary`).
        DingDictionaryError: the cached dictionary is damaged: not the file
            extracted, not UTF-8, or without a single entry or pair; the
            message names the file and the folder to delete to fetch it again.
    """
    dictionary = fetch_ding_dictionary(data_dir)
    try:
        with open(dictionary, encoding="utf-8") as handle:
            pairs, counts = parse_ding_lines(handle, sentences_only=sentences_only)
    except UnicodeDecodeError as error:
        raise _damaged(dictionary, f"not UTF-8 text: {error}") from None
    logger.info(
        "%s: %d %s pairs from %d entries (%d lines skipped)", dictionary, counts["pairs"],
        "sentence" if sentences_only else "sub-entry", counts["entries"], counts["skipped_lines"],
    )
    if not pairs:
        entries, skipped = counts["entries"], counts["skipped_lines"]
        raise _damaged(dictionary, f"no pairs from its {entries} entries, {skipped} lines skipped")
    return pairs
