"""Tests against the real local stack: Kafka broker, Spark, Delta."""
