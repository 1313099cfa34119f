"""The loops: the consumer (lanes, settlement, workers), the sweeper and its schedules' occurrences,
and how they wait for a Redis that does not answer."""
