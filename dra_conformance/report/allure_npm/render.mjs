// Renders one run's Allure results into HTML with the run's quality gate, through Allure 3's own library.
// `allure generate` does not evaluate quality gates and `allure run` watches directories for results that a test
// process may still write (seconds of polling); a finished run's results need neither, so this reads them once.
// Usage: node --import iterator-toarray.mjs render.mjs ALLURERC RESULTS_DIR. It must sit under the installed tool's
// directory, whose node_modules resolves "@allurereport/core".
import { dirname } from "node:path";
import { AllureReport, readConfig } from "@allurereport/core";

const [configPath, resultsDir] = process.argv.slice(2);
const config = await readConfig(dirname(configPath), configPath);
const report = new AllureReport({ ...config, realTime: false });
await report.start();
await report.readDirectory(resultsDir);
if (report.hasQualityGate) {
  const testResults = await report.store.allTestResults({ includeRetries: false });
  const { results } = await report.validate({ trs: testResults });
  report.realtimeDispatcher.sendQualityGateResults(results);
}
await report.done();
