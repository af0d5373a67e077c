"""What a run reports: the requirement catalogue, the verdict rule, the conformance matrix (terminal
and JSON), n/a as a value, the logs a failing test shows, and the allure glue."""
