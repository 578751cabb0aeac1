"""The peers that bench/vs_peers.py runs beside mtkit, one module each."""
