from click.testing import CliRunner

from specdec.capture.writer import RoundWriter
from specdec.cli.capture import main
from specdec.runfolder import capture_dir
from tests.support.capture_rows import rows


def test_summary_reads_a_capture_folder_or_the_run_folder_around_it(tmp_path):
    w = RoundWriter(capture_dir(tmp_path), start_thread=False)
    w.append_rows(rows(3))  # 3 verify rounds of one request, 4 proposed / 2 accepted each
    w.flush()
    for folder in (capture_dir(tmp_path), tmp_path):
        r = CliRunner().invoke(main, ["summary", str(folder)])
        assert r.exit_code == 0, r.output
        assert "1 files, 3 rows, 1 requests, 3 verify rounds" in r.output
        assert "acceptance rate (pooled, accepted/proposed): 0.500" in r.output


def test_summary_of_an_empty_folder_is_a_named_error(tmp_path):
    r = CliRunner().invoke(main, ["summary", str(tmp_path)])
    assert r.exit_code == 1 and str(tmp_path) in r.output and "no rounds-*.parquet files" in r.output
