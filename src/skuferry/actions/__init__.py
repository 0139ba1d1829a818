"""The verbs as actions: one module per verb, each carrying its verb out.

The command line parses the arguments and calls one action; the action loads the
config, does the work, prints what the verb prints, and returns the exit code. An
action raises the exception tree for the command line's edge to word: no action
turns an error into a message or an exit code of its own.
"""
