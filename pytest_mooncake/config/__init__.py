"""The plugin's configuration: options, the run matrices they name, and the stash keys through
which hooks and fixtures share what was resolved."""
