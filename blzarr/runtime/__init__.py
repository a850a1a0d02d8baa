"""What every layer of blzarr shares: compression parameters and defaults, thread counts and the
shared thread pool, which optional packages are installed, and the registry through which the
integrations above the containers attach their methods.

Modules here import nothing of blzarr but `blzarr.errors` and each other.
"""
