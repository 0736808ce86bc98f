package dev.ratelab.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.function.IntFunction;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Receipts interleaved with checks, peeks, settlements (below and above the
 * cost, soon and long after), refunds and resets, on the caller's clock,
 * against the Rust client as the oracle: Java alone, Rust alone, and the two
 * alternating on one key answer the same, call for call (decisions and
 * stamps), for every algorithm.
 */
class OracleTest extends RedisTestBase {
    private Oracle rust;
    private ProtocolClient java;

    @BeforeEach
    void drivers() {
        rust = new Oracle(server.url(), prefix);
        java = new ProtocolClient(redis, prefix);
    }

    @AfterEach
    void stopRust() {
        rust.close();
    }

    static List<String> algorithms() {
        return Protocol.algorithms();
    }

    record Step(String lang, String op, long now, long number, Integer check) {}

    /** 80 operations, 50 to 400 ms apart, by either language, as the Python cross-language test draws them. */
    static List<Step> script(String name, int seed) {
        Random rng = new Random((name + seed).hashCode());
        String[] langs = {"rust", "java"};
        List<Step> script = new ArrayList<>();
        List<int[]> checks = new ArrayList<>();
        long now = T0;
        long[] gaps = {50_000, 70_000, 150_000, 400_000};
        for (int i = 0; i < 80; i++) {
            now += gaps[rng.nextInt(gaps.length)];
            double roll = rng.nextDouble();
            if (roll < 0.45 || checks.isEmpty()) {
                checks.add(new int[] {script.size(), i % 2});
                script.add(new Step(langs[i % 2], "check", now, 1 + rng.nextInt(4), null));
            } else if (roll < 0.6) {
                script.add(new Step(langs[rng.nextInt(2)], "peek", now, rng.nextInt(4), null));
            } else if (roll < 0.94) {
                int[] held = checks.remove(rng.nextInt(checks.size()));
                long cost = script.get(held[0]).number();
                long[] actuals = {0, Math.max(0, cost - 1), cost + 1, Math.min(10, cost + 3)};
                long actual = actuals[rng.nextInt(actuals.length)];
                script.add(new Step(langs[held[1]], actual == 0 ? "refund" : "settle", now, actual, held[0]));
            } else {
                script.add(new Step(langs[rng.nextInt(2)], "reset", now, 0, null));
            }
        }
        return script;
    }

    private Map<String, Object> send(String lang, String line) {
        return lang.equals("rust") ? rust.send(line) : Repo.map(Json.parse(java.answer(line)));
    }

    /** Runs the script on {@code key}, each step by {@code langOf}; the answers without receipt numbers. */
    private List<Map<String, Object>> play(String name, List<Step> script, String key, IntFunction<String> langOf) {
        List<Map<String, Object>> answers = new ArrayList<>();
        Map<Integer, Object> receipts = new HashMap<>();
        for (int i = 0; i < script.size(); i++) {
            Step s = script.get(i);
            String lang = langOf.apply(i);
            Map<String, Object> answer;
            switch (s.op()) {
                case "check", "peek" -> {
                    answer = send(lang, s.op() + " " + name + " " + key + " " + s.number() + " " + s.now());
                    if (answer.containsKey("receipt")) {
                        receipts.put(i, answer.get("receipt"));
                    }
                }
                case "settle", "refund" -> {
                    if (!receipts.containsKey(s.check())) {
                        answers.add(Map.of("skipped", "no admission to settle"));
                        continue;
                    }
                    // A receipt is settled by the language whose check made it.
                    String owner = langOf.apply(s.check());
                    String tail = s.op().equals("settle") ? s.number() + " " + s.now() : String.valueOf(s.now());
                    answer = send(owner, s.op() + " " + name + " " + receipts.remove(s.check()) + " " + tail);
                }
                default -> answer = send(lang, "reset " + name + " " + key + " " + s.now());
            }
            assertFalse(answer.containsKey("error"), lang + " " + s + ": " + answer);
            Map<String, Object> decision = new LinkedHashMap<>(answer);
            decision.remove("receipt");
            answers.add(decision);
        }
        return answers;
    }

    @ParameterizedTest
    @MethodSource("algorithms")
    void javaDecidesAsRustCallForCallAndTheyShareAKey(String name) {
        for (int seed = 0; seed < 2; seed++) {
            List<Step> script = script(name, seed);
            List<Map<String, Object>> oracle = play(name, script, "rust" + seed, i -> "rust");
            List<Map<String, Object>> alone = play(name, script, "java" + seed, i -> "java");
            List<Map<String, Object>> shared = play(name, script, "mixed" + seed, i -> script.get(i).lang());
            for (int i = 0; i < script.size(); i++) {
                assertEquals(oracle.get(i), alone.get(i), name + " script " + seed + " step " + i + " " + script.get(i) + ": Java alone");
                assertEquals(oracle.get(i), shared.get(i), name + " script " + seed + " step " + i + " " + script.get(i) + ": Java and Rust on one key");
            }
            long refused = 0;
            long settled = 0;
            long resets = script.stream().filter(s -> s.op().equals("reset")).count();
            for (int i = 0; i < script.size(); i++) {
                String op = script.get(i).op();
                if (op.equals("check") && Boolean.FALSE.equals(oracle.get(i).get("allowed"))) {
                    refused++;
                }
                if ((op.equals("settle") || op.equals("refund")) && oracle.get(i).containsKey("remaining")) {
                    settled++;
                }
            }
            System.out.println(name + " script " + seed + ": " + refused + " refusals, " + settled + " settlements, " + resets + " resets");
            // The script reaches what it is for.
            assertTrue(refused > 0 && settled > 3, name + ": " + refused + " refusals, " + settled + " settlements");
        }
    }
}
