// Opening a V4 checkpoint directory as a runnable model.
#include "model/deepseek_v4/loaded_model.h"

namespace deepinfer::model::v4 {

LoadedModel open_model(const std::filesystem::path& directory, std::optional<NumericMode> mode,
                       ops::Backend& backend) {
  LoadedModel m;
  m.checkpoint = std::make_unique<io::Checkpoint>(io::Checkpoint::open(directory));
  m.weights = checkpoint_weights(*m.checkpoint);
  const io::ModelConfig& config = m.checkpoint->config();
  m.model = Model::load(*m.weights, config, backend, mode.value_or(default_numeric_mode(config)));
  return m;
}

}  // namespace deepinfer::model::v4
