"""Cut names by the columns a terminal gives them: a wide East-Asian character takes
two, a combining mark none (``peertext.text_width``, ``cell``, ``padded``)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from swarmgpu.core.peertext import cell, escaped, padded, shortened, text_line, text_width

CJK = "计算节点"  # four wide characters: eight columns
E_ACUTE = "e\u0301"  # e and a combining acute accent: one column


def test_text_width_counts_wide_characters_two_and_combining_marks_none() -> None:
    assert text_width("gpu-1") == 5
    assert text_width(CJK) == 8
    assert text_width("\uff21\uff22") == 4  # fullwidth A and B (F)
    assert text_width(E_ACUTE * 3) == 3


def test_a_cell_of_wide_characters_is_cut_to_its_width_in_columns() -> None:
    shown = cell("节" * 30)  # 60 columns: cut, at most 40 of them
    assert shown.endswith("...") and text_width(shown) <= 40, shown
    assert shown == "节" * 18 + "...", shown
    assert cell(CJK * 5) == CJK * 5  # 40 columns: whole


def test_a_cell_keeps_a_name_whose_combining_marks_take_no_columns() -> None:
    name = E_ACUTE * 30  # 60 characters, 30 columns
    assert cell(name) == name
    cut = cell(E_ACUTE * 50)  # 50 columns: cut after whole letters, marks kept
    assert cut == E_ACUTE * 37 + "...", cut
    assert cell("a" + "\u0301" * 10_000_000).endswith("...")  # (bounded work)


def test_padded_fills_a_column_by_the_columns_its_text_takes() -> None:
    assert padded(CJK, 10) == CJK + "  "
    assert padded(E_ACUTE, 3) == E_ACUTE + "  "
    assert padded("toolong", 3) == "toolong"


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(["a", "节", "\u0301", "\x1b", "\u202e", "\uff21",
                                           "\u2764", "\ufe0f"]),
               max_size=120), st.integers(min_value=4, max_value=50))
def test_prop_a_cell_fits_its_width_and_is_the_whole_text_or_its_start(
        text: str, width: int) -> None:
    shown = cell(text, width)
    assert text_width(shown) <= width and shown.isprintable(), shown
    whole = escaped(text)
    assert shown == whole or (shown.endswith("...") and whole.startswith(shown[:-3])), shown
    if text_width(whole) <= width and len(text) <= 4 * width + 4:  # (the work's bound)
        assert shown == whole, shown
    assert escaped(shortened(text, width)) == shown  # (the same cut, escaped after)


def test_a_cell_cut_at_its_length_bound_keeps_a_letter_with_all_its_marks() -> None:
    """A name of many marks a letter is cut at 4 characters a column (the work's bound):
    the cut fell inside a letter's marks, and the letter showed with some of them."""
    letter = "a" + "\u0301" * 10  # 11 characters, one column
    shown = cell(letter * 20)  # 220 characters, 20 columns: cut at 164, in the 15th
    assert shown == letter * 14 + "...", [len(shown), shown.count("a")]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "节"]), st.integers(0, 12)),
                max_size=30), st.integers(min_value=4, max_value=12))
def test_prop_a_cell_never_parts_a_letter_from_its_marks(
        letters: list[tuple[str, int]], width: int) -> None:
    text = "".join(c + "\u0301" * marks for c, marks in letters)
    shown = cell(text, width)
    if shown != text:  # cut: what follows its start is a letter, none of its marks
        assert not text[len(shown) - 3:].startswith("\u0301"), (shown, width)


def test_an_emoji_presentation_sequence_takes_two_columns() -> None:
    """VS16 (U+FE0F) shows the narrow character before it as a wide emoji, as terminals
    and wcwidth count it; it was counted a combining mark, the pair one column."""
    heart = "\u2764\ufe0f"  # HEAVY BLACK HEART, emoji presentation
    assert text_width(heart) == 2
    assert text_width("\U0001f600\ufe0f") == 2  # wide already: no more
    assert text_width("1\ufe0f\u20e3") == 2  # a keycap: 1, VS16, enclosing keycap
    assert padded(heart, 4) == heart + "  "
    assert text_width(cell(heart * 30)) <= 40 and cell(heart * 20) == heart * 20


def test_a_cut_never_parts_a_character_from_its_emoji_presentation() -> None:
    """A narrow character whose VS16 did not fit before the cut's ``...`` was kept
    without it: ``❤...`` showed the text heart, one column, not the name's emoji."""
    heart = "\u2764\ufe0f"
    for lead in range(30, 40):
        text = "a" * lead + heart + "b" * 10
        shown = cell(text)
        assert text_width(shown) <= 40, shown
        kept = shown[:-3]
        assert not kept.endswith("\u2764") and text.startswith(kept), (lead, shown)
    assert cell("a" * 36 + heart + "b" * 10) == "a" * 36 + "..."
    assert text_line("a" * 596 + heart + "b" * 10) == "a" * 596 + "..."


def test_a_cell_of_an_escaped_wide_character_and_vs16_fits_its_width() -> None:
    """An unassigned code point East Asian width F shows as its escape (``\\U0003fffd``,
    ASCII): the cut counted the VS16 after it as none (after a wide character), while
    ``text_width`` of the cell counts it one (after the escape's ``d``): 41 columns."""
    for lead in range(20, 36):
        shown = cell("a" * lead + "\U0003fffd\ufe0f" + "b" * 20)
        assert text_width(shown) <= 40, (lead, shown)
