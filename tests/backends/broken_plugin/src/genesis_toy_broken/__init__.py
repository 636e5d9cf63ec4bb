"""A backend plugin that fails to import, for the error-message tests."""
