"""spark-topic-router's routing domain: topic grammar, limits, validation and matchers."""

from routing.errors import TopicError
from routing.limits import Limits
from routing.validation import Policy, Validator

__all__ = ["Limits", "Policy", "TopicError", "Validator"]
