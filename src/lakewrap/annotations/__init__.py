"""Model-file annotations: the header lexer, the keyword registry and the core keywords."""
