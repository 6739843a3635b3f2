"""The only time limits tests use. CI is a busy 2-core machine: a test asserts on what the system
recorded (states, counts, verdicts), and a time limit only tells a hang or a runaway from slowness.

- ``HANG_S``: how long to wait for a child process to say something or to exit.
- ``SCHEDULING_SLACK_S``: added to a bound the code guarantees on an idle machine (a probe's
  ``max_probe_time_s`` + rollback grace) where a starved test process may see it late. Every
  adversary the budget tests use overruns a broken bound by far more (they sleep 25 s, 60 s or
  forever), so the slack hides no defect.
"""

HANG_S = 60.0
SCHEDULING_SLACK_S = 10.0
