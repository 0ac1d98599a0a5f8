from tandem.runtime.backoff import MAX_BACKOFF_S, STABLE_AFTER_S, crashes_in_a_row, restart_delay


def test_the_wait_doubles_with_each_crash_in_a_row_up_to_the_ceiling() -> None:
    streak, delays = 0, []
    for _ in range(8):
        streak = crashes_in_a_row(streak, ran_s=1.0)
        delays.append(restart_delay(streak))
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert max(delays) == MAX_BACKOFF_S


def test_a_process_that_stayed_up_starts_a_new_streak() -> None:
    streak = 0
    for _ in range(6):
        streak = crashes_in_a_row(streak, ran_s=2.0)
    assert restart_delay(streak) == MAX_BACKOFF_S
    streak = crashes_in_a_row(streak, ran_s=STABLE_AFTER_S)
    assert (streak, restart_delay(streak)) == (1, 1.0)


def test_just_short_of_stable_still_counts_as_a_crash_loop() -> None:
    assert crashes_in_a_row(3, ran_s=STABLE_AFTER_S - 0.1) == 4
