"""The cluster side: inventory, Ansible runs, bootstrap stages, the container lab, the compatibility table."""
