"""Real local stand-ins used by tests, benchmarks and offline demos (servers on 127.0.0.1, never mocks)."""
