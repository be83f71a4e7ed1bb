"""Leased work: jobs and cluster consumer groups share one lifecycle (claim, a committed start with a lease
kept alive while handlers run, fenced finishes, requeues by cause). `store` holds it, `batch` the started
batch, `jobs` and `groups` what differs per kind, `keeper` the lease renewals and the self-fence."""
