"""The storage layer: the MySQL connection and every class that runs SQL, one method per state transition.

The only code that imports the database driver; roles catch `TransientError` from here, never a
driver error."""
