"""Leased work: jobs and cluster consumer groups share one lifecycle (`store`: a committed start with a
lease kept alive while handlers run, requeues by cause, interruptions, fenced finishes) in two unit shapes,
per row (`row_units`, a group's deliveries) and per run (`run_units`, a queue's jobs, finished by `runs`);
`batch` the started batch, `jobs` and `groups` what differs per kind, `keeper` the renewals and self-fence."""
