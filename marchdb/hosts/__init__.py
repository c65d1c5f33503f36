"""Agent hosts: the hooks they run on every prompt, and the installers that wire them."""
