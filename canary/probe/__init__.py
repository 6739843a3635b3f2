"""Stage 2: the bounded canary (budget, judge, orchestrator, executors, monitors)."""
