"""Query catalogs and DDL: every SQL statement duecast runs, named, with the index it relies on.

Text only: nothing here executes a statement (the storage layer does) or imports the driver."""
