// `--help`, `COMMAND --help` and the man page, rendered from the command table.
#include <cctype>
#include <string>
#include <vector>

#include "cli/args.hpp"

namespace unilab::mps::cli {
namespace {

constexpr size_t kWidth = 100;
constexpr size_t kOptionColumn = 24;

struct ExitCode {
  const char* code;
  const char* text;
};

const std::vector<ExitCode>& exit_codes() {
  static const std::vector<ExitCode> codes = {
      {"0", "ok"},
      {"1", "error (one line on stderr says what to do)"},
      {"2", "usage"},
      {"3", "a stale record was found and cleaned (nothing was signalled)"},
      {"4", "doctor: not ready"},
  };
  return codes;
}

// Wraps `text` (which starts at column `indent`) at kWidth columns,
// continuation lines indented by `indent`.
std::string wrap(const std::string& text, size_t indent) {
  std::string out, line;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string::npos) end = text.size();
    std::string word = text.substr(pos, end - pos);
    pos = end + 1;
    if (!line.empty() && indent + line.size() + 1 + word.size() > kWidth) {
      out += line + "\n" + std::string(indent, ' ');
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  return out + line;
}

// roff: a backslash is \e, a minus is \- (so that options can be searched and
// copied), a line must not start with a control character.
std::string roff(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-') {
      out += "\\-";
    } else {
      out += c;
    }
  }
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out = "\\&" + out;
  return out;
}

std::string option_head(const OptionSpec& o) { return o.is_flag() ? o.name : o.name + " " + o.value_name; }

// "  --opt VALUE           help", wrapped under the help column.
std::string option_lines(const std::vector<OptionSpec>& options) {
  std::string out;
  for (const auto& o : options) {
    std::string head = "  " + option_head(o);
    head += std::string(head.size() < kOptionColumn ? kOptionColumn - head.size() : 1, ' ');
    out += head + wrap(o.help, kOptionColumn) + "\n";
  }
  return out;
}

// Whether `text` names option `name` as a whole word.
bool names_option(const std::string& text, const std::string& name) {
  for (size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + 1)) {
    size_t end = at + name.size();
    if (end == text.size() || !(std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '-')) return true;
  }
  return false;
}

// The summary as a sentence, then the description.
std::string about(const CommandSpec& c) { return c.summary + "." + (c.description.empty() ? "" : " " + c.description); }

std::string command_help(const CommandSpec& c) {
  std::string out = "usage: unilab-mps " + synopsis(c) + "\n\n" + wrap(about(c), 0) + "\n";
  if (!c.options.empty()) out += "\noptions:\n" + option_lines(c.options);
  out += "\nGlobal options (unilab-mps --help) apply too.\n";
  return out;
}

std::string man_options(const std::vector<OptionSpec>& options) {
  std::string out;
  for (const auto& o : options) out += ".TP\n.B " + roff(option_head(o)) + "\n" + roff(o.help) + "\n";
  return out;
}

std::string man_header() {
#ifndef UNILAB_MPS_VERSION
#define UNILAB_MPS_VERSION "unknown"
#endif
  return ".\\\" Generated from the command table (cli/command_table.cpp) by unilab-mps-manpage; do not edit.\n"
         ".TH UNILAB\\-MPS 1 \"\" \"unilab-mps " UNILAB_MPS_VERSION "\" \"User Commands\"\n"
         ".SH NAME\nunilab\\-mps \\- user\\-owned NVIDIA CUDA MPS daemons, identity\\-checked\n"
         ".SH SYNOPSIS\n.B unilab\\-mps\n[\\fIGLOBAL OPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]\n"
         ".SH DESCRIPTION\n"
         "Starts, inspects and stops NVIDIA CUDA MPS control daemons that run as the calling user, and checks a host or a "
         "Slurm node. In a Slurm cluster the SPANK plugin unilab_mps.so starts one daemon per job GPU (srun/sbatch/salloc "
         "\\-\\-unilab\\-mps) and this command inspects them (status \\-\\-job) and the node (doctor \\-\\-node).\n";
}

std::string man_footer() {
  return ".SH ENVIRONMENT\n"
         ".TP\n.B SLURM_CONF\nslurm.conf for status \\-\\-job and doctor \\-\\-node (default /etc/slurm/slurm.conf if it exists, else "
         "slurmd's configless cache /run/slurm/conf/slurm.conf)\n"
         ".TP\n.B SLURMD_NODENAME\nthe Slurm node name for status \\-\\-job and doctor \\-\\-node\n"
         ".TP\n.B CUDA_VISIBLE_DEVICES\nthe GPUs start, status and doctor consider\n"
         ".TP\n.B CUDA_MPS_PIPE_DIRECTORY\nthe pipe directory status and probe inspect\n"
         ".SH FILES\n"
         ".TP\n.I /etc/slurm/plugstack.conf\nthe plugin line whose state_dir=, nvidia_smi= and mps_control= status \\-\\-job "
         "and doctor \\-\\-node use (PlugStackConfig of slurm.conf)\n"
         ".TP\n.I /usr/share/doc/unilab\\-mps/ADMIN.md\ninstallation, plugin arguments, troubleshooting\n"
         ".SH SEE ALSO\n.BR nvidia\\-cuda\\-mps\\-control (1),\n.BR srun (1),\n.BR spank (8)\n";
}

}  // namespace

std::string synopsis(const CommandSpec& c) {
  std::string out = c.name + (c.operands.empty() ? "" : " " + c.operands);
  for (const auto& o : c.options) {
    if (names_option(c.operands, o.name)) continue;
    out += " " + (o.required ? option_head(o) : "[" + option_head(o) + "]");
  }
  return out + " [--json]";
}

std::string usage_text(const std::vector<CommandSpec>& commands, const std::vector<OptionSpec>& global,
                       const std::string& command) {
  for (const auto& c : commands) {
    if (c.name == command) return command_help(c);
  }
  std::string out =
      "usage: unilab-mps [GLOBAL OPTIONS] COMMAND [ARGS]\n\n"
      "User-owned NVIDIA CUDA MPS daemons, identity-checked.\n\ncommands:\n";
  for (const auto& c : commands) {
    std::string head = "  " + c.name;
    head += std::string(head.size() < 18 ? 18 - head.size() : 1, ' ');
    out += head + wrap(c.summary, 18) + "\n";
  }
  out += "\nglobal options:\n" + option_lines(global);
  std::string codes;
  for (const auto& c : exit_codes()) codes += std::string(codes.empty() ? "" : ", ") + c.code + " " + c.text;
  out += "\nexit codes: " + wrap(codes, 12) + "\n\n`unilab-mps COMMAND --help` shows a command's options.\n";
  return out;
}

std::string man_page(const std::vector<CommandSpec>& commands, const std::vector<OptionSpec>& global) {
  std::string out = man_header() + ".SH COMMANDS\n";
  for (const auto& c : commands) {
    out += ".SS " + roff(c.name) + "\n.B unilab\\-mps " + roff(synopsis(c)) + "\n.PP\n" + roff(about(c)) +
           "\n" + man_options(c.options);
  }
  out += ".SH GLOBAL OPTIONS\n" + man_options(global) + ".SH EXIT STATUS\n";
  for (const auto& c : exit_codes()) out += ".TP\n.B " + roff(c.code) + "\n" + roff(c.text) + "\n";
  return out + man_footer();
}

}  // namespace unilab::mps::cli
