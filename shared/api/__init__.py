"""The public API: the Registry and Ack a handler module uses, the Message a consumer gets, the
Enqueuer and Publisher that add work. No connection or client is ever handed to user code."""
