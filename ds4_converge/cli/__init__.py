"""The command line: argument parsing, output for people and programs. Nothing in the package imports it."""
