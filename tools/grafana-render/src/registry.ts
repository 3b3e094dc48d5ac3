/**
 * The registries the Grafana app fills at start-up and the npm packages leave empty.
 *
 * Glue (the app's `getAllOptionEditors` and `getStandardTransformers`): `applyFieldOverrides` only
 * applies an override property the field-config registry knows, and `transformDataFrame` only runs
 * transformations the transformer registry knows. The app registers editor UIs for every standard
 * option; a renderer needs no editors, only the id -> config path mapping, which is what this file
 * registers: every standard option, and every `custom.*` property the dashboard uses (custom
 * options belong to the panel plugin, which lives in the app).
 */
import {
  type FieldConfigPropertyItem,
  type FieldConfigSource,
  FieldConfigOptionsRegistry,
  standardTransformers,
  standardTransformersRegistry,
  type TransformerRegistryItem,
} from '@grafana/data';

// Standard field options (FieldConfig's own keys), as the app's standard option editors name them.
const STANDARD = ['unit', 'decimals', 'min', 'max', 'thresholds', 'mappings', 'color', 'links', 'displayName',
  'noValue', 'description', 'filterable', 'fieldMinMax', 'actions'];

function item(id: string): FieldConfigPropertyItem {
  const isCustom = id.startsWith('custom.');
  return {
    id,
    path: isCustom ? id.slice('custom.'.length) : id,
    name: id,
    isCustom,
    process: (value: unknown) => value,
    shouldApply: () => true,
    override: () => null,
    editor: () => null,
  } as unknown as FieldConfigPropertyItem;
}

/** A registry knowing the standard options and every custom property the panel's field config
 * uses: `applyFieldOverrides` copies a default or applies an override only for known properties. */
export function fieldConfigRegistry(config: FieldConfigSource): FieldConfigOptionsRegistry {
  const ids = new Set(STANDARD);
  Object.keys(config.defaults.custom ?? {}).forEach((key) => ids.add(`custom.${key}`));
  (config.overrides ?? []).forEach((o) => o.properties.forEach((p) => ids.add(p.id)));
  return new FieldConfigOptionsRegistry(() => [...ids].map(item));
}

let transformersReady = false;

/** Register @grafana/data's standard transformers (merge, organize, ...) once. */
export function registerTransformers(): void {
  if (transformersReady) {
    return;
  }
  transformersReady = true;
  // One entry per id: the package's map lists some transformers (noop) under two names.
  const unique = new Map(Object.values(standardTransformers).map((t) => [t.id, t]));
  standardTransformersRegistry.setInit(() =>
    [...unique.values()].map(
      (transformation) =>
        ({ id: transformation.id, aliasIds: transformation.aliasIds, name: transformation.name,
          description: transformation.description,
          // Grafana 13 loads transformers lazily: the registry holds a loader.
          transformation: () => Promise.resolve(transformation), editor: () => null }) as unknown as TransformerRegistryItem,
    ),
  );
}
