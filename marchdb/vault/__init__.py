"""The vault, the truth: Markdown memory files, their format, their tags, and reading and writing them safely."""
