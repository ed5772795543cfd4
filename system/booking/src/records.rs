//! Placeholder: the record store port (DynamoDB-like), written next.
