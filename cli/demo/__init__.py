"""`duecast demo`: the user_block_status re-scan run live on this machine: `run` drives it, `data` fills
the table, `fleet` starts the processes, `view` draws the live display and the summary."""
