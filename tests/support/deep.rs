//! The 280-file fixture: a Python project of forty packages of seven helper modules each, and
//! one bug (`app/m29/pricing.py` subtracts the tax) that one failing test finds. Shared by
//! tests/it/agent_run.rs and benches/prompt.rs, which measures the prompt on it.

#![allow(dead_code)]

/// The buggy line, and the fix as a SEARCH/REPLACE answer.
pub const BUG: &str = "return price - tax";
pub const FIX: &str = "app/m29/pricing.py\n<<<<<<< SEARCH\n    return price - tax\n=======\n    return price + tax\n>>>>>>> REPLACE\n";

/// The project in a new temporary folder, with `config` as its `.agent-ls.toml`.
pub fn project(config: &str) -> tempfile::TempDir {
    let ws = tempfile::tempdir().expect("a temporary folder");
    let root = ws.path();
    let write = |path: &str, text: &str| {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    write(
        "test_app.py",
        "import unittest\n\nfrom app.m29.pricing import net\n\n\nclass PricingTests(unittest.TestCase):\n    def test_net_adds_tax(self):\n        self.assertEqual(net(100, 20), 120)\n",
    );
    write("app/__init__.py", "");
    for m in 0..40 {
        write(&format!("app/m{m:02}/__init__.py"), "");
        for f in 0..7 {
            let body: String = (0..30)
                .map(|i| format!("def helper_{f}_{i}(x):\n    return x + {i}\n\n"))
                .collect();
            write(&format!("app/m{m:02}/util{f}.py"), &body);
        }
    }
    // Forty lines of history above the function: too large for a tight budget.
    let history: String = (1..=40)
        .map(|i| format!("# pricing rule {i}: kept for the auditors\n"))
        .collect();
    write(
        "app/m29/pricing.py",
        &format!("{history}def net(price, tax):\n    return price - tax\n"),
    );
    write(".agent-ls.toml", config);
    ws
}
