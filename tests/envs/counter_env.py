"""A user environment in TRL's environment_factory shape with two tools (tests/envs/test_user_class.py)."""


class CounterEnv:
    def reset(self, **row):
        self.total, self.target = 0, int(row.get("answer", 0))
        return f"Reach {self.target}."

    def add(self, n: int) -> str:
        """Add n to the counter.

        Args:
            n: how much to add
        """
        self.total += int(n)
        return str(self.total)

    def show(self) -> str:
        """The counter's value."""
        return str(self.total)

    def get_reward(self) -> float:
        return 1.0 if self.total == self.target else 0.0


class NoReset:
    def get_reward(self) -> float:
        return 0.0


class Undocumented(CounterEnv):
    def peek(self) -> str:
        return "x"
