"""The rules of delayq, with no Redis and no AWS: errors, settings, jobs and their states, time and
backoff math, calendars, schedule definitions, lateness, a loop's budget, telemetry."""
