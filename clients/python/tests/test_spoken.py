"""streamd_client.spoken: spoken text -> Truncate's keep_tokens (no daemon, no Pipecat)."""
from streamd_client.spoken import TurnLedger, spoken_end


def ledger(*deltas):
    t = TurnLedger("g-1")
    for n, text in deltas:
        t.add_delta(n, text)
    return t


def test_cut_at_the_spoken_words():
    t = ledger((1, "Hello"), (2, " there"), (1, ","), (1, ""), (1, " friend"))
    assert t.cut() == (0, "")
    t.add_spoken("Hello")
    assert t.cut() == (1, "Hello")
    t.add_spoken("there,")  # TTS words come without spaces
    assert t.cut() == (4, "Hello there,")
    t.add_spoken("fri")  # half a word: the token is not kept
    assert t.cut() == (4, "Hello there,")
    t.add_spoken("end")
    assert t.cut() == (6, "Hello there, friend")


def test_a_delta_with_no_text_goes_with_the_text_that_completes_it():
    t = ledger((1, "caf"), (1, ""), (1, "é"))
    t.add_spoken("caf")
    assert t.cut() == (1, "caf")
    t.add_spoken("é")
    assert t.cut() == (3, "café")


def test_rewritten_text_stops_the_match():
    assert spoken_end("It costs 5 euros", "It costs five euros") == len("It costs")
    t = ledger((1, "It"), (1, " costs"), (1, " 5"), (1, " euros"))
    t.add_spoken("It costs five euros")
    assert t.cut() == (2, "It costs")


def test_a_multi_token_delta_is_kept_whole_or_not_at_all():
    t = ledger((1, "One"), (3, " two three"))
    t.add_spoken("One two")
    assert t.cut() == (1, "One")
    t.add_spoken(" three")
    assert t.cut() == (4, "One two three")
