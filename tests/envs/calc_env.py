"""A user environment with two tools for the end-to-end test (tests/envs/test_class_training.py): the tools demo's
calculator as a method of the user's class, and `show`; the reward is whether the last result was the answer."""


class CalcEnv:
    def reset(self, **row):
        self.target, self.last = str(row["answer"]), None
        return None  # the question alone: tiny_tools was warmed up on bare questions

    def calculator(self, expression: str) -> str:
        """Add and subtract whole numbers, e.g. 12+30-4.

        Args:
            expression: numbers joined by + or -
        """
        total, sign, digits = 0, 1, ""
        for ch in expression.replace(" ", "") + "+":
            if ch.isdigit():
                digits += ch
            elif ch in "+-" and digits:
                total, sign, digits = total + sign * int(digits), 1 if ch == "+" else -1, ""
            else:
                raise ValueError(f"cannot read {expression!r}")
        self.last = str(total)
        return self.last

    def show(self) -> str:
        """The last result, or none."""
        return self.last or "none"

    def get_reward(self) -> float:
        return 1.0 if self.last == self.target else 0.0
