//! Placeholder: the queue port (SQS-FIFO-like), written next.
