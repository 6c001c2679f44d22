"""What `berth` exits with (docs/cli.md). CI scripts branch on these."""

OK = 0
REFUSED = 1  # the server refused the request (invalid job, not allowed, conflict)
USAGE = 2  # bad command line or job file
NOT_AUTHENTICATED = 3  # not logged in, or the token is invalid, expired or revoked
NOT_FOUND = 4  # no such job / team (or it belongs to another team)
UNAVAILABLE = 5  # network errors, 5xx or 429 still failing after the retries
JOB_FAILED = 10  # `berth wait`: the job failed
JOB_CANCELLED = 11  # `berth wait`: the job was cancelled
WAIT_TIMEOUT = 12  # `berth wait --timeout`: the job had not finished in time
