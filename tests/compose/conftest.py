"""The compose stack brought up for real (:mod:`iadeep.testing.compose`): images, data folder, stacks."""

from iadeep.testing.compose import compose_stack, stack_data, stack_images  # noqa: F401 - pytest finds fixtures by name
